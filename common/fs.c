#define _XOPEN_SOURCE 700 /* nftw */
#include "fs.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int colo_mkdirs(const char *path, unsigned mode) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
      return -1;
    *p = '/';
  }
  return mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST ? -1 : 0;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  return type == FTW_DP ? rmdir(path) : unlink(path);
}

int colo_rmtree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? 0 : -1;
  return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}
