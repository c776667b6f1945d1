/* Helpers shared by the confined and the unconfined halves of core.fs (see fs.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_PATH */
#endif
#include "fs.h"

#include <lauxlib.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_CHUNK ((size_t)64 << 10) /* bytes read past fstat's size, per step */

int sb_fs_read_fd(lua_State *L, int fd, size_t max, long long *size) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return errno;
  if (S_ISDIR(st.st_mode))
    return EISDIR;
  if (!S_ISREG(st.st_mode))
    return SB_FS_E_NOT_FILE;
  *size = (long long)st.st_size;
  if ((uint64_t)st.st_size > max)
    return SB_FS_E_TOO_LARGE;
  luaL_Buffer b;
  luaL_buffinitsize(L, &b, (size_t)st.st_size + 1);
  size_t total = 0;
  for (;;) {
    /* Ask for the expected size plus one byte, then chunks: EOF must be seen, and a file that
     * grows past `max` while we read is caught by reading at most max + 1 bytes. */
    size_t room = total < (size_t)st.st_size ? (size_t)st.st_size - total + 1 : READ_CHUNK;
    if (room > max - total + 1)
      room = max - total + 1;
    char *p = luaL_prepbuffsize(&b, room);
    ssize_t got = read(fd, p, room);
    if (got < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    if (got == 0)
      break;
    luaL_addsize(&b, (size_t)got);
    total += (size_t)got;
    if (total > max) {
      *size = (long long)total;
      return SB_FS_E_TOO_LARGE;
    }
  }
  luaL_pushresult(&b);
  return 0;
}

static int write_all(int fd, const char *data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    data += w;
    n -= (size_t)w;
  }
  return 0;
}

int sb_fs_write_atomic_at(int dirfd, const char *base, const char *data, size_t n, mode_t mode,
                          bool sync) {
  static unsigned counter; /* the engine is single-threaded; O_EXCL settles any clash */
  char tmp[256];
  int fd = -1, rc = 0;
  for (int attempt = 0; attempt < 100; attempt++) {
    /* ".<name>.<pid>.<n>.tmp": hidden, same directory (so rename is atomic), and never longer
     * than NAME_MAX however long the name is. */
    snprintf(tmp, sizeof tmp, ".%.200s.%ld.%u.tmp", base, (long)getpid(), counter++);
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST)
      break;
  }
  if (fd < 0)
    return errno;
  rc = write_all(fd, data, n);
  if (rc == 0 && fchmod(fd, mode) < 0)
    rc = errno;
  if (rc == 0 && sync && fsync(fd) < 0)
    rc = errno;
  if (close(fd) < 0 && rc == 0)
    rc = errno;
  if (rc == 0 && renameat(dirfd, tmp, dirfd, base) < 0)
    rc = errno;
  if (rc != 0)
    unlinkat(dirfd, tmp, 0);
  return rc;
}

static int remove_at(int dirfd, const char *name, int depth);

/* Removes everything in the directory open on `fd` (takes ownership). */
static int empty_dir(int fd, int depth) {
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    int err = errno;
    close(fd);
    return err;
  }
  int first = 0;
  struct dirent *e;
  while ((errno = 0, e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    int rc = remove_at(dirfd(d), e->d_name, depth + 1);
    if (rc != 0 && first == 0)
      first = rc;
  }
  if (errno != 0 && first == 0)
    first = errno;
  closedir(d);
  return first;
}

static int remove_at(int dirfd, const char *name, int depth) {
  int first = 0;
  /* A few rounds: a directory swapped for a link (or refilled) between our steps. */
  for (int round = 0; round < 3; round++) {
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
      return first;
    if (errno != EISDIR) /* Linux reports a directory as EISDIR */
      return first != 0 ? first : errno;
    if (depth >= SB_FS_MAX_TREE_DEPTH)
      return SB_FS_E_TOO_DEEP;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT)
        return first;
      if (errno == ELOOP || errno == ENOTDIR)
        continue; /* now a symlink or a file: unlink it on the next round */
      return first != 0 ? first : errno;
    }
    int rc = empty_dir(fd, depth);
    if (rc != 0 && first == 0)
      first = rc;
    if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
      return first;
    if (errno != ENOTEMPTY || first != 0)
      return first != 0 ? first : errno;
    /* ENOTEMPTY with no failure of ours: entries appeared meanwhile; go round again. */
  }
  return first != 0 ? first : ENOTEMPTY;
}

int sb_fs_remove_tree_at(int dirfd, const char *name) { return remove_at(dirfd, name, 0); }

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int sb_fs_push_sorted_names(lua_State *L, int fd) {
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    int err = errno;
    close(fd);
    return err;
  }
  char **names = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((errno = 0, e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (len == cap) {
      size_t ncap = cap ? cap * 2 : 32;
      char **grown = realloc(names, ncap * sizeof *names);
      if (grown == NULL) {
        rc = ENOMEM;
        goto done;
      }
      names = grown;
      cap = ncap;
    }
    if ((names[len] = strdup(e->d_name)) == NULL) {
      rc = ENOMEM;
      goto done;
    }
    len++;
  }
  if (errno != 0) {
    rc = errno;
    goto done;
  }
  if (len > 0) /* an empty directory: names is NULL, which qsort must not get */
    qsort(names, len, sizeof *names, compare_names);
  lua_createtable(L, (int)len, 0);
  for (size_t i = 0; i < len; i++) {
    lua_pushstring(L, names[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }

done:
  for (size_t i = 0; i < len; i++)
    free(names[i]);
  free(names);
  closedir(d);
  return rc;
}

const char *sb_fs_type_name(mode_t mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "file";
  case S_IFDIR: return "dir";
  case S_IFLNK: return "link";
  case S_IFIFO: return "fifo";
  case S_IFSOCK: return "socket";
  case S_IFCHR: return "char";
  case S_IFBLK: return "block";
  default: return "unknown";
  }
}

void sb_fs_display(char *out, size_t cap, const char *path, size_t len) {
  static const char hex[] = "0123456789abcdef";
  const size_t shown = 160; /* bytes of the path before "..." */
  size_t o = 0;
  if (cap < 16)
    return;
  out[o++] = '"';
  for (size_t i = 0; i < len && i < shown; i++) {
    unsigned char c = (unsigned char)path[i];
    if (o + 6 >= cap)
      break;
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    } else {
      out[o++] = (char)c;
    }
  }
  if (len > shown && o + 5 < cap) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o++] = '"';
  out[o] = '\0';
}
