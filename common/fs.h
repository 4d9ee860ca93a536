/* Small file-system helpers shared by the daemons. */
#ifndef COLO_FS_H
#define COLO_FS_H

/* mkdir -p: creates path and its missing parents with `mode`. 0, or -1 with errno set. */
int colo_mkdirs(const char *path, unsigned mode);

#endif
