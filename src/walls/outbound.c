/* The instance's outbound network for --net host: pasta, or a veth on sandboxd's bridge
 * (--bridge-port: bridge.c sets it up and the launcher exits, so no process stays), started by a
 * launcher the holder forks while still root, told to join the instance's namespaces as soon as
 * bwrap has cloned them (outbound_go), and waited for before the instance is reported ready
 * (outbound_ready). */
#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "walls/bridge.h"
#include "walls/walls.h"

/* The instance's network namespace gets outbound access through pasta (passt's namespace mode):
 * a user-mode TCP/UDP/ICMP translator on the host side that opens ordinary sockets as the
 * instance's host uid. It is told to forward no port either way (-t/-u/-T/-U none: by default
 * it would map ports bound on the host's loopback into the namespace) and not to map the
 * gateway address to the host (--no-map-gw), so nothing bound to the host's 127.0.0.1
 * (sandboxd, the resident, the bot's listener) is reachable from inside. Nor anything the host
 * has on [::] or 0.0.0.0: IPv4 only (--ipv4-only; pasta's MAC is the host's, so the gateway's
 * link-local address was the host's own, and pasta connects a link-local destination on the host's
 * interface), and its sockets bound to the interface of the host's default route
 * (--outbound-if4, SO_BINDTODEVICE), where the host's addresses on its other interfaces (a
 * container bridge's 10.88.0.1) are not local.
 *
 * pasta runs as the instance's uid and opens /dev/net/tun; Debian's udev makes that node 0666,
 * a host without udev may have it 0600. So a launcher, forked while the holder is still root,
 * gives pasta a private mount namespace whose /dev/net holds a tun node of the instance's uid
 * (nothing of the host changes), drops to that uid, starts pasta in the foreground and reports
 * once pasta has configured the namespace (pasta writes its pid file — a FIFO here — after
 * that). The launcher stays as pasta's parent: holder → launcher → pasta, each dying with its
 * parent (PR_SET_PDEATHSIG), so pasta ends with the instance, also after a kill -9 of sandboxd.
 * Both are in the instance's cgroups (its memory and pids limits count them). */

static void outbound_launcher(const options *o, pid_t holder, int go, int up) {
  char text[32];
  ssize_t n;
  do
    n = read(go, text, sizeof text - 1);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    _exit(EXIT_WALLS); /* the holder gave up */
  text[n] = '\0';
  long inner = strtol(text, NULL, 10);
  for (int fd = 3; fd < 1024; fd++) /* the holder's workspace, socket and binds: not ours */
    if (fd != up)
      close(fd);
  if (o->bridge_port != NULL) { /* a veth on sandboxd's bridge: set up, then nothing stays */
    char why[256];
    if (walls_bridge_attach(o->bridge_port, inner, why, sizeof why) < 0) {
      errno = 0;
      die("bridge: %s", why);
    }
    _exit(write(up, "1", 1) == 1 ? 0 : EXIT_WALLS);
  }
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    die("pasta: a private mount namespace");
  int given_tun = open("/dev/net/tun", O_PATH | O_CLOEXEC); /* before the tmpfs covers it */
  if (mount("tmpfs", "/dev/net", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0700,size=16k") < 0 ||
      mkfifo("/dev/net/ready", 0600) < 0 ||
      chown("/dev/net", (uid_t)o->uid, (gid_t)o->gid) < 0 ||
      chown("/dev/net/ready", (uid_t)o->uid, (gid_t)o->gid) < 0)
    die("pasta: cannot prepare /dev/net for the instance's uid");
  if (mknod("/dev/net/tun", S_IFCHR | 0600, makedev(10, 200)) == 0) {
    if (chown("/dev/net/tun", (uid_t)o->uid, (gid_t)o->gid) < 0)
      die("pasta: cannot give /dev/net/tun to the instance's uid");
  } else {
    /* The kernel makes device nodes only for CAP_MKNOD in the host's user namespace: in a
     * container of a user namespace of its own (a Kubernetes pod with hostUsers: false) the
     * container's own /dev/net/tun is bound here instead, which any uid must be able to open
     * (0666, as udev makes it). */
    int refused = errno, made = -1;
    struct stat st;
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", given_tun);
    if (refused != EPERM || given_tun < 0 || fstat(given_tun, &st) < 0 || !S_ISCHR(st.st_mode) ||
        (st.st_mode & 0006) != 0006 ||
        (made = open("/dev/net/tun", O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
        mount(src, "/dev/net/tun", NULL, MS_BIND, NULL) < 0)
      die("pasta: cannot make a tun node for the instance's uid, nor bind this container's "
          "/dev/net/tun (it must exist, mode 0666)");
    close(made);
  }
  if (given_tun >= 0)
    close(given_tun);
  /* bwrap makes the network namespace in a user namespace of its own and the instance's init in
   * one nested below it (for uid 1000 inside), so /proc/PID/ns/user is not the network's owner,
   * which pasta must join: it is asked of the namespace itself (NS_GET_USERNS), and both are
   * bound onto files of this private /dev/net for pasta to open by path. */
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/ns/net", inner);
  int net = open(path, O_RDONLY | O_CLOEXEC);
  int owner = net < 0 ? -1 : ioctl(net, NS_GET_USERNS);
  if (owner < 0)
    die("pasta: the instance's network namespace (pid %ld)", inner);
  char net_src[64], owner_src[64];
  snprintf(net_src, sizeof net_src, "/proc/self/fd/%d", net);
  snprintf(owner_src, sizeof owner_src, "/proc/self/fd/%d", owner);
  int f1 = open("/dev/net/netns", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  int f2 = open("/dev/net/userns", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (f1 < 0 || f2 < 0 || mount(net_src, "/dev/net/netns", NULL, MS_BIND, NULL) < 0 ||
      mount(owner_src, "/dev/net/userns", NULL, MS_BIND, NULL) < 0)
    die("pasta: cannot bind the instance's namespaces for it");
  close(f1);
  close(f2);
  close(net);
  close(owner);
  drop_to(o);
  die_with_parent(holder);
  int ready = open("/dev/net/ready", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (ready < 0)
    die("pasta: open its ready FIFO");
  pid_t me = getpid();
  pid_t pasta = fork();
  if (pasta < 0)
    die("fork pasta");
  if (pasta == 0) {
    die_with_parent(me);
    char *argv[] = {"pasta", "--foreground", "--quiet", "--config-net",
                    "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw",
                    "--ipv4-only", "--netns", "/dev/net/netns", "--userns", "/dev/net/userns",
                    "--pid", "/dev/net/ready", NULL, NULL, NULL};
    size_t end = 0;
    while (argv[end] != NULL)
      end++;
    if (o->outbound_if != NULL) { /* into the two free slots; the last stays NULL */
      argv[end] = "--outbound-if4";
      argv[end + 1] = (char *)o->outbound_if;
    }
    execvp("pasta", argv);
    die("cannot run pasta (apt-get install passt)");
  }
  /* pasta writes its pid into the FIFO once the namespace's interface, address and routes are
   * set; it ending first is a failure (its own words are on stderr). */
  for (;;) {
    struct pollfd p = {ready, POLLIN, 0};
    int r = poll(&p, 1, 50);
    if (r > 0 && (p.revents & POLLIN)) {
      char pid_text[32];
      if (read(ready, pid_text, sizeof pid_text) > 0)
        break;
    }
    int status;
    if (waitpid(pasta, &status, WNOHANG) == pasta)
      _exit(EXIT_WALLS);
  }
  close(ready);
  if (write(up, "1", 1) != 1)
    _exit(EXIT_WALLS);
  close(up);
  int status;
  while (waitpid(pasta, &status, 0) < 0 && errno == EINTR) {
  }
  _exit(0);
}

/* Forks the launcher (we are still root here); it waits for outbound_go. */
outbound outbound_start(const options *o) {
  outbound ob = {0, -1, -1};
  if (strcmp(o->net, "host") != 0)
    return ob;
  int go[2], up[2];
  if (pipe2(go, O_CLOEXEC) < 0 || pipe2(up, O_CLOEXEC) < 0)
    die("pipe");
  pid_t holder = getpid();
  ob.pid = fork();
  if (ob.pid < 0)
    die("fork the network launcher");
  if (ob.pid == 0) {
    close(go[1]);
    close(up[0]);
    stdout_to_null(); /* it and pasta write nothing there (process.c) */
    outbound_launcher(o, holder, go[0], up[1]);
  }
  close(go[0]);
  close(up[1]);
  ob.go = go[1];
  ob.up = up[0];
  return ob;
}

/* The instance's namespaces exist (`inner` is its init, just cloned by bwrap): pasta starts
 * joining them now, while bwrap still builds the instance's view — pasta's own start (its tables
 * and buffers: tens of ms on a quiet host, seconds on a loaded one) runs beside bwrap's mounts and
 * the init's exec instead of after them. False when the launcher is gone. */
bool outbound_go(outbound *ob, long inner) {
  if (ob->pid == 0)
    return true;
  char text[32];
  int len = snprintf(text, sizeof text, "%ld", inner);
  bool ok = write(ob->go, text, (size_t)len) == len;
  close(ob->go);
  ob->go = -1;
  return ok;
}

/* Returns once pasta has configured the network, false when it could not start. */
bool outbound_ready(outbound *ob) {
  if (ob->pid == 0)
    return true;
  char byte;
  ssize_t got;
  do
    got = read(ob->up, &byte, 1);
  while (got < 0 && errno == EINTR);
  close(ob->up);
  return got == 1;
}
