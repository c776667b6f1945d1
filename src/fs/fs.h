/* core.fs internals shared by root.c (confined to a root) and files.c (the program's own
 * trusted files). Helpers return 0 or a positive errno, or one of the negative codes below, so
 * each caller words its own message (confined messages never name the root's host path). */
#ifndef SB_FS_H
#define SB_FS_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define SB_FS_DEFAULT_MAX_READ ((size_t)64 << 20) /* bytes */
#define SB_FS_MAX_TREE_DEPTH 256                  /* directory levels remove_tree descends */

enum {
  SB_FS_E_TOO_LARGE = -1, /* over max_bytes */
  SB_FS_E_NOT_FILE = -2,  /* a fifo, socket or device where a regular file was expected */
  SB_FS_E_TOO_DEEP = -3,  /* a tree deeper than SB_FS_MAX_TREE_DEPTH */
};

/* Reads the regular file open on `fd` (not closed here) and pushes it as a Lua string; at most
 * `max` bytes (fstat's size is checked first, and the read stops at max + 1 in case the file
 * grew). Returns 0 with the string pushed, EISDIR, SB_FS_E_NOT_FILE, SB_FS_E_TOO_LARGE (with
 * *size set to the size seen) or an errno; on failure something may still be pushed, which the
 * caller leaves under its `nil, err`. */
int sb_fs_read_fd(lua_State *L, int fd, size_t max, long long *size);

/* Writes data[0..n) to `base` in the directory open on `dirfd` (an O_PATH fd is fine)
 * atomically: a new temp file in the same directory (O_CREAT|O_EXCL|O_NOFOLLOW, so nothing
 * planted there is followed), exact `mode` (umask does not apply), optional fsync, then
 * renameat over `base`. A symlink at `base` is replaced, never written through. The temp file
 * is removed on failure. Returns 0 or an errno. */
int sb_fs_write_atomic_at(int dirfd, const char *base, const char *data, size_t n, mode_t mode,
                          bool sync);

/* Removes `name` in `dirfd` and, if it is a directory, everything beneath it, without
 * following any symlink: links are unlinked, directories are opened with O_NOFOLLOW relative to
 * their parent's fd, so a symlink swapped in for a directory is never crossed. A missing
 * `name` is success. Keeps going past failures and returns the first one (0 when clean). */
int sb_fs_remove_tree_at(int dirfd, const char *name);

/* Reads the names in the directory open on `fd` (takes ownership of fd), skipping . and ..,
 * and pushes them as a sorted Lua array. Returns 0 or an errno (nothing pushed then). */
int sb_fs_push_sorted_names(lua_State *L, int fd);

/* The type word for stat results: "file", "dir", "link", "fifo", "socket", "char", "block". */
const char *sb_fs_type_name(mode_t mode);

/* Copies `path` into out[cap] for a message: quoted, control bytes and quotes escaped, long
 * paths shortened, so a path can never forge a log line. */
void sb_fs_display(char *out, size_t cap, const char *path, size_t len);

/* Sets core.fs (files.c): the program's own files and fs.root. */
int sb_fs_open(lua_State *L);

/* Sets core.fs.root and the root handle's metatable (root.c). */
void sb_fs_root_fields(lua_State *L);

#endif
