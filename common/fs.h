/* Small file-system helpers shared by the daemons. */
#ifndef COLO_FS_H
#define COLO_FS_H

/* mkdir -p: creates path and its missing parents with `mode`. 0, or -1 with errno set. */
int colo_mkdirs(const char *path, unsigned mode);

/* rm -r: removes path and everything below it, not following links. 0 (also when path does not
 * exist), or -1 with errno set by the first failure. */
int colo_rmtree(const char *path);

#endif
