/* A scratch directory for the fuzz targets that read files (fuzz.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

static char dir[64];

/* at exit: the directory and its files (it holds no directories) */
static void remove_dir(void) {
  DIR *d = opendir(dir);
  char path[400];
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  }
  if (d)
    closedir(d);
  rmdir(dir);
}

const char *colo_fuzz_dir(void) {
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/colo-fuzz-XXXXXX");
    if (!mkdtemp(dir))
      abort();
    atexit(remove_dir);
  }
  return dir;
}

const char *colo_fuzz_put(const char *name, const uint8_t *data, size_t size) {
  static char path[160];
  snprintf(path, sizeof path, "%s/%s", colo_fuzz_dir(), name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
    abort();
  return path;
}
