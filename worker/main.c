/* colo-workerd: one per node. This build only answers --help and --version; registration, the
 * heartbeat and reconcile loop, and rank launching come with the worker issue. */
#include <stdio.h>
#include <string.h>

static void usage(FILE *out) {
  fprintf(out, "usage: colo-workerd [--help] [--version]\n"
               "\n"
               "The colo worker daemon: registers this node's devices with colod, heartbeats,\n"
               "and starts and stops the training ranks colod places here.\n"
               "\n"
               "This build does not run a worker yet: it prints this help and exits.\n");
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("colo-workerd %s\n", COLO_VERSION);
    return 0;
  }
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  usage(stderr);
  fprintf(stderr, "colo-workerd: not implemented in this build\n");
  return 2;
}
