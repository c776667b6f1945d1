/* Finding the Lua program relative to the binary (see lua_dir.h for the order and why). */
#include "install/lua_dir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The installed layout: bin/switchboard beside share/switchboard/lua (GNUInstallDirs). */
static const char relative[] = "/../share/switchboard/lua";

/* A directory holds the program when its CLI module is readable there. */
static int holds_program(const char *dir) {
  char probe[PATH_MAX];
  int n = snprintf(probe, sizeof probe, "%s/switchboard/cli.lua", dir);
  return n > 0 && (size_t)n < sizeof probe && access(probe, R_OK) == 0;
}

/* <dir of /proc/self/exe>/../share/switchboard/lua into out, or 0 when it cannot be made. */
static int beside_binary(char *out, size_t size) {
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0)
    return 0;
  exe[len] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash == NULL)
    return 0;
  *slash = '\0';
  int n = snprintf(out, size, "%s%s", exe, relative);
  return n > 0 && (size_t)n < size;
}

const char *sb_install_lua_dir(char *out, size_t size, const char *built_in) {
  const char *env = getenv("SWITCHBOARD_LUA_DIR");
  if (env != NULL && env[0] != '\0' && strlen(env) < size) {
    memcpy(out, env, strlen(env) + 1);
    return out;
  }
  if (beside_binary(out, size) && holds_program(out))
    return out;
  snprintf(out, size, "%s", built_in);
  return out;
}
