/* The spawning thread (see spawn_thread.h): a FIFO of jobs in, a FIFO of results out, one
 * mutex over both, a condition variable to wake the thread and a uv_async to wake the loop. */
#include "spawn_thread.h"
#include "../engine/engine.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct spawn_job {
  sb_spawn_args args; /* pointers into the job's own allocation, after the struct */
  bool with_stdin;
  sb_spawn_done_fn done;
  void *ud;
  int rc;            /* set by the thread; ECANCELED until it has run (never spawned) */
  sb_spawned child;  /* set by the thread when rc is 0 */
  struct spawn_job *next;
} spawn_job;

typedef struct {
  spawn_job *head, *tail;
} job_queue;

static struct {
  bool running;           /* the thread and the async exist (loop's thread only) */
  bool broken;            /* they could not be made: every spawn stays on the loop's thread */
  bool stopping;          /* under lock: the thread ends once its current job is done */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  job_queue todo, done;   /* under lock */
  uv_async_t async;       /* loop's thread only, apart from uv_async_send */
  unsigned in_flight;     /* jobs queued and not yet delivered (loop's thread only) */
} S = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static void queue_push(job_queue *q, spawn_job *j) {
  j->next = NULL;
  if (q->tail != NULL)
    q->tail->next = j;
  else
    q->head = j;
  q->tail = j;
}

static spawn_job *queue_take_all(job_queue *q) {
  spawn_job *all = q->head;
  q->head = q->tail = NULL;
  return all;
}

/* ---- the copy of the arguments ------------------------------------------------------------ */

static size_t count(char *const *v) {
  size_t n = 0;
  while (v[n] != NULL)
    n++;
  return n;
}

static size_t strings_size(char *const *v) {
  size_t total = 0;
  for (size_t i = 0; v[i] != NULL; i++)
    total += strlen(v[i]) + 1;
  return total;
}

/* Copies v's strings to *bytes (advancing it) and their addresses to out, NULL-terminated. */
static void copy_vector(char *const *v, char **out, char **bytes) {
  size_t i = 0;
  for (; v[i] != NULL; i++) {
    size_t len = strlen(v[i]) + 1;
    memcpy(*bytes, v[i], len);
    out[i] = *bytes;
    *bytes += len;
  }
  out[i] = NULL;
}

/* One allocation: the job, both pointer arrays, then every string. */
static spawn_job *job_new(const sb_spawn_args *a) {
  size_t na = count(a->argv), ne = count(a->envp);
  size_t cwd_len = a->cwd != NULL ? strlen(a->cwd) + 1 : 0;
  size_t size = sizeof(spawn_job) + (na + 1 + ne + 1) * sizeof(char *) + strings_size(a->argv) +
                strings_size(a->envp) + cwd_len;
  spawn_job *j = calloc(1, size);
  if (j == NULL)
    return NULL;
  char **argv = (char **)(j + 1), **envp = argv + na + 1;
  char *bytes = (char *)(envp + ne + 1);
  copy_vector(a->argv, argv, &bytes);
  copy_vector(a->envp, envp, &bytes);
  j->args.argv = argv;
  j->args.envp = envp;
  if (a->cwd != NULL) {
    memcpy(bytes, a->cwd, cwd_len);
    j->args.cwd = bytes;
  }
  return j;
}

/* ---- the thread ---------------------------------------------------------------------------- */

static void *spawning_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&S.lock);
  for (;;) {
    while (S.todo.head == NULL && !S.stopping)
      pthread_cond_wait(&S.wake, &S.lock);
    if (S.stopping)
      break; /* what is still queued is dropped by the shutdown, unspawned */
    spawn_job *j = S.todo.head;
    S.todo.head = j->next;
    if (S.todo.head == NULL)
      S.todo.tail = NULL;
    pthread_mutex_unlock(&S.lock);
    /* The one reason for this thread: the vfork suspends this thread, not the loop's. */
    j->rc = sb_spawn_start(&j->args, j->with_stdin, &j->child);
    pthread_mutex_lock(&S.lock);
    queue_push(&S.done, j);
    uv_async_send(&S.async); /* under the lock: the shutdown closes the async only after join */
  }
  pthread_mutex_unlock(&S.lock);
  return NULL;
}

/* ---- the loop's side ----------------------------------------------------------------------- */

static void deliver(uv_async_t *h) {
  (void)h;
  pthread_mutex_lock(&S.lock);
  spawn_job *j = queue_take_all(&S.done);
  pthread_mutex_unlock(&S.lock);
  while (j != NULL) {
    spawn_job *next = j->next;
    if (--S.in_flight == 0)
      uv_unref((uv_handle_t *)&S.async); /* nothing awaited: the async keeps no loop alive */
    j->done(j->ud, j->rc, j->rc == 0 ? &j->child : NULL, j->args.argv[0], j->args.cwd);
    free(j);
    j = next;
  }
}

/* A child started that nobody will take: killed with its group (it leads one: setsid) and
 * reaped, its descriptors closed. */
static void discard(spawn_job *j) {
  if (j->rc == 0 && j->child.pid > 0) {
    kill(-j->child.pid, SIGKILL);
    while (waitpid(j->child.pid, NULL, 0) < 0 && errno == EINTR) {
    }
    close(j->child.pidfd);
    if (j->child.stdin_fd >= 0)
      close(j->child.stdin_fd);
    close(j->child.stdout_fd);
    close(j->child.stderr_fd);
  }
  free(j);
}

static void discard_all(spawn_job *j) {
  while (j != NULL) {
    spawn_job *next = j->next;
    discard(j);
    j = next;
  }
}

static void spawn_thread_shutdown(void *ud) {
  (void)ud;
  if (!S.running)
    return;
  pthread_mutex_lock(&S.lock);
  S.stopping = true;
  pthread_cond_signal(&S.wake);
  pthread_mutex_unlock(&S.lock);
  pthread_join(S.thread, NULL);
  discard_all(queue_take_all(&S.todo));
  discard_all(queue_take_all(&S.done));
  uv_close((uv_handle_t *)&S.async, NULL); /* static storage: nothing to free */
  S.running = S.stopping = false;
  S.in_flight = 0;
}

/* The async on this engine's loop, then the thread, with every signal blocked in it (signals
 * are the loop's to handle; a spawned child gets its own mask from spawn.c). */
static int start(void) {
  int rc = uv_async_init(sb_loop(), &S.async, deliver);
  if (rc != 0) {
    S.broken = true;
    return -rc;
  }
  uv_unref((uv_handle_t *)&S.async);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = pthread_create(&S.thread, NULL, spawning_thread, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0 || !sb_shutdown_register(spawn_thread_shutdown, NULL)) {
    if (rc == 0) { /* cannot be joined at shutdown: stop it now */
      pthread_mutex_lock(&S.lock);
      S.stopping = true;
      pthread_cond_signal(&S.wake);
      pthread_mutex_unlock(&S.lock);
      pthread_join(S.thread, NULL);
      S.stopping = false;
      rc = ENOMEM;
    }
    uv_close((uv_handle_t *)&S.async, NULL); /* (never re-initialised: broken from now) */
    S.broken = true;
    return rc;
  }
  S.running = true;
  return 0;
}

int sb_spawn_off_loop(const sb_spawn_args *a, bool with_stdin, sb_spawn_done_fn done, void *ud) {
  if (S.broken)
    return EAGAIN;
  if (!S.running) {
    int rc = start();
    if (rc != 0)
      return rc;
  }
  spawn_job *j = job_new(a);
  if (j == NULL)
    return ENOMEM;
  j->rc = ECANCELED; /* a job dropped unrun at shutdown has no child to kill */
  j->with_stdin = with_stdin;
  j->done = done;
  j->ud = ud;
  if (S.in_flight++ == 0)
    uv_ref((uv_handle_t *)&S.async); /* a task awaits the result: the loop must stay up */
  pthread_mutex_lock(&S.lock);
  queue_push(&S.todo, j);
  pthread_cond_signal(&S.wake);
  pthread_mutex_unlock(&S.lock);
  return 0;
}
