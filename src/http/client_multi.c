/* libcurl multi ↔ libuv glue (see client_multi.h). Nothing here knows about Lua. */
#include "client_multi.h"
#include "../engine/engine.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* One watched socket. Freed in its close callback. */
typedef struct sock_ctx {
  uv_poll_t poll;
  curl_socket_t fd;
  struct sock_ctx *prev, *next;
} sock_ctx;

static struct {
  CURLM *multi;          /* NULL until the first request, and after teardown */
  bool global_inited;    /* curl_global_init ran */
  uv_timer_t timer;      /* libcurl's single timeout (CURLMOPT_TIMERFUNCTION); unref'd */
  uv_timer_t keeper;     /* ref'd and running while jobs are in flight: our sockets and the
                            timer are unref'd so that idle cached connections never keep the
                            loop alive, so this is what does while a request waits */
  int curl_depth;        /* > 0 while inside curl_multi_socket_action */
  bool cancels_pending;  /* some job has cancel_pending set */
  sb_curl_job jobs;      /* sentinel of the jobs in flight */
  size_t n_jobs;
  sock_ctx socks;        /* sentinel of the watched sockets */
} M;

/* ---- sockets ------------------------------------------------------------------------------ */

static void sock_closed(uv_handle_t *h) { free(h->data); }

static void sock_release(sock_ctx *ctx) {
  ctx->prev->next = ctx->next;
  ctx->next->prev = ctx->prev;
  /* Stopping removes the fd from epoll now, before libcurl closes it right after we return. */
  uv_poll_stop(&ctx->poll);
  uv_close((uv_handle_t *)&ctx->poll, sock_closed);
}

static void after_curl(void);

static void socket_action(curl_socket_t fd, int flags) {
  int running = 0;
  M.curl_depth++;
  curl_multi_socket_action(M.multi, fd, flags, &running);
  M.curl_depth--;
  after_curl();
}

static void on_poll(uv_poll_t *poll, int status, int events) {
  sock_ctx *ctx = poll->data;
  int flags = 0;
  if (status < 0)
    flags = CURL_CSELECT_ERR;
  else {
    if (events & UV_READABLE)
      flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
      flags |= CURL_CSELECT_OUT;
  }
  socket_action(ctx->fd, flags);
}

/* CURLMOPT_SOCKETFUNCTION: libcurl says which events it wants on `fd`. */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  (void)easy;
  (void)userp;
  sock_ctx *ctx = socketp;
  if (what == CURL_POLL_REMOVE) {
    if (ctx != NULL) {
      curl_multi_assign(M.multi, fd, NULL);
      sock_release(ctx);
    }
    return 0;
  }
  if (ctx == NULL) {
    ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
      return -1;
    if (uv_poll_init_socket(sb_loop(), &ctx->poll, fd) != 0) {
      free(ctx);
      return -1;
    }
    ctx->fd = fd;
    ctx->poll.data = ctx;
    uv_unref((uv_handle_t *)&ctx->poll);
    ctx->next = M.socks.next;
    ctx->prev = &M.socks;
    M.socks.next->prev = ctx;
    M.socks.next = ctx;
    curl_multi_assign(M.multi, fd, ctx);
  }
  int events = 0;
  if (what & CURL_POLL_IN)
    events |= UV_READABLE;
  if (what & CURL_POLL_OUT)
    events |= UV_WRITABLE;
  uv_poll_start(&ctx->poll, events, on_poll);
  return 0;
}

/* ---- timer -------------------------------------------------------------------------------- */

static void on_timer(uv_timer_t *t) {
  (void)t;
  socket_action(CURL_SOCKET_TIMEOUT, 0);
}

/* CURLMOPT_TIMERFUNCTION: -1 stops the timer; 0 means "as soon as possible", which must not
 * be a direct call (libcurl forbids re-entry), so it becomes a 0 ms timer: the next turn. */
static int on_timer_change(CURLM *multi, long timeout_ms, void *userp) {
  (void)multi;
  (void)userp;
  if (timeout_ms < 0)
    uv_timer_stop(&M.timer);
  else
    sb_timer_start(&M.timer, on_timer, (uint64_t)timeout_ms);
  return 0;
}

static void keeper_tick(uv_timer_t *t) { (void)t; }

/* ---- jobs --------------------------------------------------------------------------------- */

static void job_unlink(sb_curl_job *job) {
  job->prev->next = job->next;
  job->next->prev = job->prev;
  job->prev = job->next = NULL;
  if (--M.n_jobs == 0)
    uv_timer_stop(&M.keeper);
}

/* Removes the job's handle and hands it to its owner. `done` may resume Lua, which may start
 * and cancel other jobs: callers must not hold pointers to other jobs across this call. */
static void job_finish(sb_curl_job *job, CURLcode result) {
  curl_multi_remove_handle(M.multi, job->easy);
  job_unlink(job);
  job->done(job, result);
}

static void run_pending_cancels(void) {
  while (M.cancels_pending) {
    M.cancels_pending = false;
    for (sb_curl_job *job = M.jobs.next; job != &M.jobs; job = job->next) {
      if (job->cancel_pending) {
        M.cancels_pending = true; /* rescan: finishing may have changed the list */
        job_finish(job, CURLE_ABORTED_BY_CALLBACK);
        break;
      }
    }
  }
}

static void drain_done(void) {
  CURLMsg *msg;
  int left;
  while (M.multi != NULL && (msg = curl_multi_info_read(M.multi, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    CURLcode result = msg->data.result;
    sb_curl_job *job = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&job);
    job_finish(job, result);
  }
}

static void after_curl(void) {
  run_pending_cancels();
  drain_done();
}

/* ---- close-on-exec for libcurl's own descriptors ---------------------------------------- */

/* curl_multi_init (7.68+) opens a socketpair for curl_multi_wakeup without SOCK_CLOEXEC and
 * gives no way to reach it. It is created once, so we note the sockets that lack FD_CLOEXEC
 * before the call and mark the new ones after it. (Connection sockets are made close-on-exec
 * by the request's CURLOPT_OPENSOCKETFUNCTION.) */
typedef struct {
  int *fds; /* owned */
  size_t len, cap;
} fd_set_list;

static bool plain_socket(int fd) {
  struct stat st;
  int flags = fcntl(fd, F_GETFD);
  return flags >= 0 && !(flags & FD_CLOEXEC) && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

static void list_plain_sockets(fd_set_list *out) {
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL)
    return;
  struct dirent *d;
  while ((d = readdir(dir)) != NULL) {
    int fd = atoi(d->d_name);
    if (d->d_name[0] == '.' || fd == dirfd(dir) || !plain_socket(fd))
      continue;
    if (out->len == out->cap) {
      size_t cap = out->cap ? out->cap * 2 : 16;
      int *grown = realloc(out->fds, cap * sizeof *grown);
      if (grown == NULL)
        break;
      out->fds = grown;
      out->cap = cap;
    }
    out->fds[out->len++] = fd;
  }
  closedir(dir);
}

static void mark_new_sockets_cloexec(const fd_set_list *before) {
  fd_set_list after = {0};
  list_plain_sockets(&after);
  for (size_t i = 0; i < after.len; i++) {
    bool old = false;
    for (size_t j = 0; j < before->len && !old; j++)
      old = before->fds[j] == after.fds[i];
    if (!old)
      fcntl(after.fds[i], F_SETFD, fcntl(after.fds[i], F_GETFD) | FD_CLOEXEC);
  }
  free(after.fds);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

static bool multi_create(char *err, size_t err_len) {
  if (!M.global_inited) {
    CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) {
      snprintf(err, err_len, "libcurl initialisation failed: %s", curl_easy_strerror(rc));
      return false;
    }
    M.global_inited = true;
  }
  fd_set_list before = {0};
  list_plain_sockets(&before);
  M.multi = curl_multi_init();
  mark_new_sockets_cloexec(&before);
  free(before.fds);
  if (M.multi == NULL) {
    snprintf(err, err_len, "libcurl multi handle: out of memory");
    return false;
  }
  curl_multi_setopt(M.multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(M.multi, CURLMOPT_TIMERFUNCTION, on_timer_change);
  uv_timer_init(sb_loop(), &M.timer);
  uv_unref((uv_handle_t *)&M.timer);
  uv_timer_init(sb_loop(), &M.keeper);
  M.jobs.prev = M.jobs.next = &M.jobs;
  M.socks.prev = M.socks.next = &M.socks;
  return true;
}

bool sb_curl_job_start(sb_curl_job *job, char *err, size_t err_len) {
  if (sb_loop() == NULL) {
    snprintf(err, err_len, "the engine is shut down");
    return false;
  }
  if (M.multi == NULL && !multi_create(err, err_len))
    return false;
  job->cancel_pending = false;
  curl_easy_setopt(job->easy, CURLOPT_PRIVATE, (char *)job);
  CURLMcode rc = curl_multi_add_handle(M.multi, job->easy);
  if (rc != CURLM_OK) {
    snprintf(err, err_len, "libcurl: %s", curl_multi_strerror(rc));
    return false;
  }
  job->next = M.jobs.next;
  job->prev = &M.jobs;
  M.jobs.next->prev = job;
  M.jobs.next = job;
  if (M.n_jobs++ == 0)
    uv_timer_start(&M.keeper, keeper_tick, 3600000, 3600000);
  return true;
}

void sb_curl_job_cancel(sb_curl_job *job) {
  if (job->prev == NULL) /* already finished */
    return;
  if (M.curl_depth > 0) {
    job->cancel_pending = true;
    M.cancels_pending = true;
    return;
  }
  job_finish(job, CURLE_ABORTED_BY_CALLBACK);
}

void sb_curl_teardown(void) {
  if (M.multi == NULL)
    return;
  while (M.jobs.next != &M.jobs) {
    sb_curl_job *job = M.jobs.next;
    curl_multi_remove_handle(M.multi, job->easy);
    job_unlink(job);
    job->dispose(job);
  }
  curl_multi_cleanup(M.multi);
  M.multi = NULL;
  while (M.socks.next != &M.socks)
    sock_release(M.socks.next);
  uv_close((uv_handle_t *)&M.timer, NULL);
  uv_close((uv_handle_t *)&M.keeper, NULL);
  if (M.global_inited) {
    curl_global_cleanup();
    M.global_inited = false;
  }
}
