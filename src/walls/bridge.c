/* The bridge and each instance's veth pair, through rtnetlink (bridge.h; docs/isolation.md
 * "Outbound through a bridge"). Netlink rather than Debian's CNI plugins: the plugins are Go
 * programs started once per instance (a process and ~10-30 ms each on a loaded host, the cost
 * this replaces pasta to avoid), keep their own address files under /var/lib/cni, and would
 * still need nftables rules of ours for the host's own addresses; the few messages below are
 * all an instance needs. */
#include "walls/bridge.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_bridge.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { MSG_BYTES = 1024, EXIT_WALLS = 70 };

/* One request being built: the header, then attributes appended (aligned) up to MSG_BYTES. */
typedef struct {
  union {
    struct nlmsghdr h;
    char bytes[MSG_BYTES];
  } u;
} nl_msg;

static void msg_init(nl_msg *m, uint16_t type, uint16_t flags, const void *body, size_t len) {
  memset(m, 0, sizeof *m);
  m->u.h.nlmsg_type = type;
  m->u.h.nlmsg_flags = (uint16_t)(NLM_F_REQUEST | NLM_F_ACK | flags);
  m->u.h.nlmsg_len = (uint32_t)NLMSG_LENGTH(len);
  memcpy(NLMSG_DATA(&m->u.h), body, len);
}

/* Appends one attribute; every caller's message is far below MSG_BYTES (a fixed set of short
 * names and addresses), so running out is a programming error, reported as E2BIG. */
static struct rtattr *put(nl_msg *m, uint16_t type, const void *data, size_t len) {
  size_t at = NLMSG_ALIGN(m->u.h.nlmsg_len);
  if (at + RTA_SPACE(len) > sizeof m->u.bytes)
    return NULL;
  struct rtattr *a = (struct rtattr *)(m->u.bytes + at);
  a->rta_type = type;
  a->rta_len = (uint16_t)RTA_LENGTH(len);
  if (len > 0)
    memcpy(RTA_DATA(a), data, len);
  m->u.h.nlmsg_len = (uint32_t)(at + RTA_SPACE(len));
  return a;
}

static struct rtattr *put_str(nl_msg *m, uint16_t type, const char *s) { return put(m, type, s, strlen(s) + 1); }
static struct rtattr *put_u32(nl_msg *m, uint16_t type, uint32_t v) { return put(m, type, &v, sizeof v); }

/* A nested attribute ends where the message now ends. */
static void nest_end(nl_msg *m, struct rtattr *nest) {
  nest->rta_len = (uint16_t)(m->u.bytes + m->u.h.nlmsg_len - (char *)nest);
}

/* Sends one request on a fresh socket of this process's current network namespace and waits for
 * its acknowledgement. Returns 0 or -errno (the kernel's answer, or the socket's failure). */
static int talk(nl_msg *m, bool built) {
  if (!built)
    return -E2BIG;
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0)
    return -errno;
  int rc = -EIO;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  m->u.h.nlmsg_seq = 1;
  if (sendto(fd, m, m->u.h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
    rc = -errno;
    goto out;
  }
  for (;;) {
    union {
      struct nlmsghdr h;
      char bytes[8192];
    } reply;
    ssize_t n = recv(fd, &reply, sizeof reply, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) { /* 0: the kernel never sends an empty datagram; not waited on forever */
      rc = n < 0 ? -errno : -EIO;
      goto out;
    }
    for (struct nlmsghdr *h = &reply.h; NLMSG_OK(h, (unsigned)n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        rc = ((struct nlmsgerr *)NLMSG_DATA(h))->error; /* 0: the acknowledgement */
        goto out;
      }
    }
  }
out:
  close(fd);
  return rc;
}

/* Removes the link `name` in this namespace; one already gone is fine. */
static int link_delete(const char *name) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  nl_msg m;
  msg_init(&m, RTM_DELLINK, 0, &ifi, sizeof ifi);
  int rc = talk(&m, put_str(&m, IFLA_IFNAME, name) != NULL);
  return rc == -ENODEV ? 0 : rc;
}

static int link_up(int index) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = index, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
  nl_msg m;
  msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof ifi);
  return talk(&m, true);
}

static int addr_add(int index, struct in_addr addr, int prefix) {
  struct ifaddrmsg ifa = {.ifa_family = AF_INET, .ifa_prefixlen = (unsigned char)prefix,
                          .ifa_scope = RT_SCOPE_UNIVERSE, .ifa_index = (unsigned)index};
  nl_msg m;
  msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
  bool ok = put(&m, IFA_LOCAL, &addr, sizeof addr) && put(&m, IFA_ADDRESS, &addr, sizeof addr);
  return talk(&m, ok);
}

static int route_default(int index, struct in_addr gateway) {
  struct rtmsg rt = {.rtm_family = AF_INET, .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT,
                     .rtm_scope = RT_SCOPE_UNIVERSE, .rtm_type = RTN_UNICAST};
  nl_msg m;
  msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof rt);
  bool ok = put(&m, RTA_GATEWAY, &gateway, sizeof gateway) && put_u32(&m, RTA_OIF, (uint32_t)index);
  return talk(&m, ok);
}

/* IPv6 off on an interface of this namespace before it is up, so it never has even a link-local
 * address (the sysctl tree is the opener's network namespace's). A kernel without IPv6 has no
 * such file: nothing to turn off. */
static int ipv6_off(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", name);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : -errno;
  int rc = write(fd, "1", 1) == 1 ? 0 : -errno;
  close(fd);
  return rc;
}

static int fail(char *why, size_t size, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *why, size_t size, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(why, size, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < size && rc < 0)
    snprintf(why + n, size - (size_t)n, ": %s", strerror(-rc));
  return -1;
}

/* "A.B.C.D/P" → address and prefix; false when it is not one. */
static bool parse_cidr(const char *text, struct in_addr *addr, int *prefix) {
  char buf[32];
  const char *slash = strchr(text, '/');
  if (slash == NULL || (size_t)(slash - text) >= sizeof buf)
    return false;
  memcpy(buf, text, (size_t)(slash - text));
  buf[slash - text] = '\0';
  char *end;
  long p = strtol(slash + 1, &end, 10);
  if (*end != '\0' || end == slash + 1 || p < 1 || p > 30)
    return false;
  *prefix = (int)p;
  return inet_pton(AF_INET, buf, addr) == 1;
}

static int bridge_create(const char *name) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  nl_msg m;
  msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
  bool ok = put_str(&m, IFLA_IFNAME, name);
  struct rtattr *info = ok ? put(&m, IFLA_LINKINFO, NULL, 0) : NULL;
  ok = info && put_str(&m, IFLA_INFO_KIND, "bridge");
  if (ok)
    nest_end(&m, info);
  return talk(&m, ok);
}

/* The bridge `name` with `gateway`/`prefix`, IPv6 off, up: made when missing, and every step
 * idempotent, so two instances' launchers that find it missing at once both end with it whole
 * (a Linux bridge holds at most 1,024 ports: sandboxd's instances are spread over several, each
 * made by the first instance that needs it). Returns its index, or -errno. */
static int bridge_ensure(const char *name, struct in_addr gateway, int prefix) {
  int index = (int)if_nametoindex(name);
  if (index > 0)
    return index;
  int rc = bridge_create(name);
  if ((rc < 0 && rc != -EEXIST) || (rc = ipv6_off(name)) < 0)
    return rc;
  if ((index = (int)if_nametoindex(name)) == 0)
    return -errno;
  rc = addr_add(index, gateway, prefix);
  if ((rc < 0 && rc != -EEXIST) || (rc = link_up(index)) < 0)
    return rc;
  return index;
}

/* The host end of the pair: made with its peer already in the instance's namespace (as eth0), a
 * port of the bridge from birth. */
static int veth_create(const char *port, int master, int ns_fd) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  nl_msg m;
  msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
  bool ok = put_str(&m, IFLA_IFNAME, port) && put_u32(&m, IFLA_MASTER, (uint32_t)master);
  struct rtattr *info = ok ? put(&m, IFLA_LINKINFO, NULL, 0) : NULL;
  ok = info && put_str(&m, IFLA_INFO_KIND, "veth");
  struct rtattr *data = ok ? put(&m, IFLA_INFO_DATA, NULL, 0) : NULL;
  /* the peer's own ifinfomsg, then its attributes: its name inside and its namespace */
  struct ifinfomsg peer_ifi = {.ifi_family = AF_UNSPEC};
  struct rtattr *peer = data ? put(&m, VETH_INFO_PEER, &peer_ifi, sizeof peer_ifi) : NULL;
  ok = peer && put_str(&m, IFLA_IFNAME, "eth0") && put_u32(&m, IFLA_NET_NS_FD, (uint32_t)ns_fd);
  if (ok) {
    nest_end(&m, peer);
    nest_end(&m, data);
    nest_end(&m, info);
  }
  return talk(&m, ok);
}

/* The port may not talk to the bridge's other isolated ports: instances never reach each other,
 * even on the same segment (IFLA_BRPORT_ISOLATED, Linux 4.18). */
static int port_isolate(int index) {
  struct ifinfomsg ifi = {.ifi_family = AF_BRIDGE, .ifi_index = index};
  nl_msg m;
  msg_init(&m, RTM_SETLINK, 0, &ifi, sizeof ifi);
  struct rtattr *prot = put(&m, IFLA_PROTINFO | NLA_F_NESTED, NULL, 0);
  uint8_t on = 1;
  bool ok = prot && put(&m, IFLA_BRPORT_ISOLATED, &on, sizeof on);
  if (ok)
    nest_end(&m, prot);
  return talk(&m, ok);
}

int walls_bridge_attach(const char *spec, long inner, char *why, size_t why_size) {
  char bridge[IF_NAMESIZE], port[IF_NAMESIZE], cidr[32], gw_text[20];
  struct in_addr addr, gateway;
  int prefix, rc, ns_fd = -1, result = -1;
  if (sscanf(spec, "%15[^,],%15[^,],%31[^,],%19s", bridge, port, cidr, gw_text) != 4 ||
      !parse_cidr(cidr, &addr, &prefix) || inet_pton(AF_INET, gw_text, &gateway) != 1)
    return fail(why, why_size, 0, "--bridge-port takes BRIDGE,PORT,A.B.C.D/PREFIX,GATEWAY, not '%s'", spec);
  int master = bridge_ensure(bridge, gateway, prefix);
  if (master < 0)
    return fail(why, why_size, master, "cannot make the bridge %s with %s/%d", bridge, gw_text, prefix);
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/ns/net", inner);
  ns_fd = open(path, O_RDONLY | O_CLOEXEC);
  if (ns_fd < 0) {
    fail(why, why_size, -errno, "the instance's network namespace (pid %ld)", inner);
    goto out;
  }
  if ((rc = link_delete(port)) < 0 || (rc = veth_create(port, master, ns_fd)) < 0) {
    fail(why, why_size, rc, "cannot make the instance's veth pair %s on %s", port, bridge);
    goto out;
  }
  int host_end = (int)if_nametoindex(port);
  if (host_end == 0 || (rc = port_isolate(host_end)) < 0 || (rc = link_up(host_end)) < 0) {
    fail(why, why_size, host_end == 0 ? -errno : rc, "cannot isolate and raise the bridge port %s", port);
    goto out;
  }
  if (setns(ns_fd, CLONE_NEWNET) < 0) {
    fail(why, why_size, -errno, "cannot enter the instance's network namespace");
    goto out;
  }
  int eth0 = (int)if_nametoindex("eth0");
  if (eth0 == 0 || (rc = ipv6_off("eth0")) < 0 || (rc = addr_add(eth0, addr, prefix)) < 0 ||
      (rc = link_up(eth0)) < 0 || (rc = route_default(eth0, gateway)) < 0) {
    fail(why, why_size, eth0 == 0 ? -errno : rc, "cannot give the instance's eth0 %s via %s", cidr, gw_text);
    goto out;
  }
  result = 0;
out:
  if (ns_fd >= 0)
    close(ns_fd);
  return result;
}

/* Turns IPv4 forwarding on in this network namespace; *was_on says whether it already was. */
static int forwarding_on(bool *was_on) {
  int fd = open("/proc/sys/net/ipv4/ip_forward", O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  char c = '0';
  int rc = 0;
  if (read(fd, &c, 1) != 1 || lseek(fd, 0, SEEK_SET) < 0 || write(fd, "1", 1) != 1)
    rc = -errno;
  *was_on = c == '1';
  close(fd);
  return rc;
}

static int usage(const char *why) {
  fprintf(stderr, "walls: %s (switchboard-walls bridge-up --bridge NAME --address A.B.C.D/PREFIX | "
                  "bridge-down --bridge NAME [--count N] | bridge-sweep --bridge NAME)\n", why);
  return EXIT_WALLS;
}

/* Whether `name` is one a server of prefix `server` (sb<6 hex>) makes: a bridge, server + "b" +
 * digits, or an instance's host end, server + "-" + digits (shell/bridge.lua port_spec). Another
 * root's (another hex) or anything else of the host never matches. */
static bool is_servers(const char *name, const char *server) {
  size_t n = strlen(server);
  if (strncmp(name, server, n) != 0 || (name[n] != 'b' && name[n] != '-'))
    return false;
  const char *digits = name + n + 1;
  if (*digits == '\0')
    return false;
  for (; *digits != '\0'; digits++)
    if (*digits < '0' || *digits > '9')
      return false;
  return true;
}

/* The names of every link of this network namespace that is_servers(server), by one
 * RTM_GETLINK dump: their count, the names in *out (malloc'd, IF_NAMESIZE bytes each), or -errno. */
static long links_of(const char *server, char (**out)[IF_NAMESIZE]) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  nl_msg m;
  msg_init(&m, RTM_GETLINK, NLM_F_DUMP, &ifi, sizeof ifi);
  m.u.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP; /* no ACK: a dump ends with NLMSG_DONE */
  m.u.h.nlmsg_seq = 1;
  char (*names)[IF_NAMESIZE] = NULL;
  long count = 0, room = 0, rc = -EIO;
  static union { /* static: 64 KiB off this one-shot process's stack */
    struct nlmsghdr h;
    char bytes[1 << 16]; /* a dump's datagram: several links' messages, each with its stats */
  } reply;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0)
    return -errno;
  if (sendto(fd, &m, m.u.h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
    rc = -errno;
    goto out;
  }
  for (;;) {
    ssize_t n = recv(fd, &reply, sizeof reply, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      rc = n < 0 ? -errno : -EIO;
      goto out;
    }
    for (struct nlmsghdr *h = &reply.h; NLMSG_OK(h, (unsigned)n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        rc = count;
        goto out;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        rc = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
        rc = rc < 0 ? rc : -EIO;
        goto out;
      }
      if (h->nlmsg_type != RTM_NEWLINK)
        continue;
      int len = (int)IFLA_PAYLOAD(h);
      for (struct rtattr *a = IFLA_RTA(NLMSG_DATA(h)); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type != IFLA_IFNAME || RTA_PAYLOAD(a) > IF_NAMESIZE ||
            strnlen(RTA_DATA(a), RTA_PAYLOAD(a)) >= IF_NAMESIZE || !is_servers(RTA_DATA(a), server))
          continue;
        if (count == room) {
          room = room == 0 ? 64 : room * 2;
          char(*more)[IF_NAMESIZE] = realloc(names, (size_t)room * IF_NAMESIZE);
          if (more == NULL) {
            rc = -ENOMEM;
            goto out;
          }
          names = more;
        }
        snprintf(names[count++], IF_NAMESIZE, "%s", (const char *)RTA_DATA(a));
      }
    }
  }
out:
  close(fd);
  if (rc < 0) {
    free(names);
    names = NULL;
  }
  *out = names;
  return rc;
}

/* `bridge-sweep --bridge sb<hex>`: every bridge and instance port of that server removed, whatever
 * their number (a kill -9's, whatever uid_count it ran with, and the host ends of instances the
 * kernel has not torn down yet); prints "removed NAME" for each. */
static int sweep(const char *server) {
  char(*names)[IF_NAMESIZE] = NULL;
  char why[256];
  int result = EXIT_WALLS;
  long n = links_of(server, &names);
  if (n < 0) {
    fail(why, sizeof why, (int)n, "cannot list this network namespace's links");
    goto out;
  }
  for (long i = 0; i < n; i++) {
    int rc = link_delete(names[i]); /* a veth gone with its peer, or its bridge's, is fine */
    if (rc < 0) {
      fail(why, sizeof why, rc, "cannot remove %s", names[i]);
      goto out;
    }
    printf("removed %s\n", names[i]);
  }
  result = 0;
out:
  if (result != 0)
    fprintf(stderr, "walls: %s\n", why);
  free(names);
  return result;
}

int walls_bridge_main(int argc, char **argv) {
  const char *name = NULL, *address = NULL;
  long count = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--bridge") == 0) name = argv[i + 1];
    else if (strcmp(argv[i], "--address") == 0) address = argv[i + 1];
    else if (strcmp(argv[i], "--count") == 0) count = strtol(argv[i + 1], NULL, 10);
    else return usage("unknown option");
  }
  if (name == NULL || strlen(name) >= IF_NAMESIZE - 4 || (argc % 2) != 0 || count < 0 || count > 4096)
    return usage("--bridge NAME (at most 11 bytes) is required; --count at most 4096");
  if (strcmp(argv[1], "bridge-sweep") == 0)
    return sweep(name);
  bool up = strcmp(argv[1], "bridge-up") == 0;
  char why[256];
  /* a kill -9's leftovers, or this stop's own: NAME, or NAME0 … NAME<count-1> */
  for (long k = count == 0 ? -1 : 0; k < count; k++) {
    char each[32]; /* NAME is at most 11 bytes and k below 4,096: it fits IFNAMSIZ */
    if (k < 0)
      snprintf(each, sizeof each, "%s", name);
    else
      snprintf(each, sizeof each, "%s%ld", name, k);
    int rc = link_delete(each);
    if (rc < 0) {
      fail(why, sizeof why, rc, "cannot remove the bridge %s", each);
      goto failed;
    }
  }
  if (!up)
    return 0;
  int rc;
  struct in_addr addr;
  int prefix;
  bool was_on = false;
  if (address == NULL || !parse_cidr(address, &addr, &prefix))
    return usage("bridge-up needs --address A.B.C.D/PREFIX");
  if ((rc = bridge_ensure(name, addr, prefix)) < 0) {
    fail(why, sizeof why, rc, "cannot make the bridge %s with %s", name, address);
    goto failed;
  }
  if ((rc = forwarding_on(&was_on)) < 0) {
    fail(why, sizeof why, rc, "cannot turn IPv4 forwarding on (/proc/sys/net/ipv4/ip_forward)");
    link_delete(name);
    goto failed;
  }
  printf("forwarding %s\n", was_on ? "was-on" : "was-off");
  return 0;
failed:
  fprintf(stderr, "walls: %s\n", why);
  return EXIT_WALLS;
}
