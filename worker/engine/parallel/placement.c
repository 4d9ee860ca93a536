/* Placement of ZeRO's pieces across the device, host memory and NVMe (zero.h): the homes a
 * static placement gives, the moves of an automatic one after its warm-up step, and the NVMe
 * file's reads and writes. */
#include "zero.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "../../../common/fs.h"
#include "zero_mem.h"

/* whole reads and writes of the NVMe file at a byte offset */
static int nvme_io(colo_zero_t *z, void *buf, size_t bytes, off_t off, int write) {
  char *b = buf;
  while (bytes) {
    ssize_t r = write ? pwrite(z->nvme_fd, b, bytes, off) : pread(z->nvme_fd, b, bytes, off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      snprintf(z->error, sizeof z->error, "%s the optimizer state in %s: %s",
               write ? "writing" : "reading", z->nvme_path, r < 0 ? strerror(errno) : "short read");
      return COLO_EIO;
    }
    b += r;
    bytes -= (size_t)r;
    off += r;
  }
  return 0;
}

/* chunk k's moments on NVMe: n floats of m and of v, at the start of its region */
int colo_zero_nvme_moments(colo_zero_t *z, size_t k, float *m, float *v, size_t n, int write) {
  size_t piece = z->chunks.chunks[k].capacity / (size_t)z->dp;
  off_t at = (off_t)(z->optim_off[k] * 2 * sizeof(float));
  int rc = nvme_io(z, m, n * sizeof(float), at, write);
  return rc ? rc : nvme_io(z, v, n * sizeof(float), at + (off_t)(piece * sizeof(float)), write);
}

void colo_zero_placed(const colo_zero_t *z, colo_placed_t *out) {
  memset(out, 0, sizeof *out);
  out->chunks = z->chunks.n;
  for (size_t k = 0; k < z->chunks.n; k++) {
    out->param_device += z->param_home[k] == COLO_HOME_DEVICE;
    out->optim_device += z->optim_home[k] == COLO_HOME_DEVICE;
    out->optim_nvme += z->optim_home[k] == COLO_HOME_NVME;
  }
  out->host_bytes =
      z->param_n[COLO_HOME_HOST] * z->esz + 2 * z->optim_n[COLO_HOME_HOST] * sizeof(float);
  out->nvme_bytes = 2 * z->optim_n[COLO_HOME_NVME] * sizeof(float);
}

/* the chunks [from, end) whose pieces make up `frac` of this rank's floats, to the nearest
 * chunk: one is in when at least half of it fits */
static size_t take_chunks(const colo_zero_t *z, size_t from, float frac) {
  double budget = (double)frac * (double)z->shard_n, acc = 0.0;
  size_t k = from;
  for (; k < z->chunks.n; k++) {
    double piece = (double)(z->chunks.chunks[k].capacity / (size_t)z->dp);
    if (acc + piece / 2 >= budget)
      break;
    acc += piece;
  }
  return k;
}

/* each piece's offset in its home, from the homes, and the floats each home holds */
static void index_homes(colo_zero_t *z) {
  memset(z->optim_n, 0, sizeof z->optim_n);
  memset(z->param_n, 0, sizeof z->param_n);
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t piece = z->chunks.chunks[k].capacity / (size_t)z->dp;
    z->param_off[k] = z->param_n[z->param_home[k]];
    z->param_n[z->param_home[k]] += piece;
    z->optim_off[k] = z->optim_n[z->optim_home[k]];
    z->optim_n[z->optim_home[k]] += z->frozen ? 0 : piece; /* a frozen model has none */
  }
}

int colo_zero_place(colo_zero_t *z, const colo_placement_t *pl, char *err, size_t errlen) {
  if (!pl || (pl->param_device >= 1.0f && pl->optim_device >= 1.0f && pl->optim_nvme <= 0.0f))
    return 0;
  if (pl->param_device < 1.0f && z->stage != 3) {
    snprintf(err, errlen,
             "parameters leave the device only as ZeRO-3 pieces, and this run has ZeRO stage %d",
             z->stage);
    return COLO_EINVAL;
  }
  if (z->stage < 1 || !z->be->device) {
    snprintf(err, errlen, "%s",
             z->stage < 1 ? "optimizer state leaves the device only as ZeRO pieces (stage 1 and up)"
                          : "placing chunks off the device needs a device (resources.device=gpu)");
    return COLO_EINVAL;
  }
  if (z->frozen && (pl->optim_device < 1.0f || pl->optim_nvme > 0.0f)) {
    snprintf(err, errlen,
             "memory.optim_device_fraction and optim_nvme_fraction place the model's optimizer "
             "state, and a frozen model (LoRA) has none: its adapters' stays on the device");
    return COLO_EINVAL;
  }
  size_t n = z->chunks.n;
  size_t kp = z->stage == 3 ? take_chunks(z, 0, pl->param_device) : n;
  size_t kd = take_chunks(z, 0, pl->optim_device);
  kd = kd < kp ? kd : kp; /* host parameters are updated on the host */
  size_t kn = pl->optim_nvme > 0.0f ? take_chunks(z, kd, pl->optim_nvme) : kd;
  for (size_t k = 0; k < n; k++) {
    z->param_home[k] = k < kp ? COLO_HOME_DEVICE : COLO_HOME_HOST;
    z->optim_home[k] = k < kd ? COLO_HOME_DEVICE : k < kn ? COLO_HOME_NVME : COLO_HOME_HOST;
  }
  index_homes(z);
  size_t nh = z->optim_n[COLO_HOME_HOST] ? z->optim_n[COLO_HOME_HOST] : 1;
  z->host_m = host_floats(z, nh);
  z->host_v = host_floats(z, nh);
  z->param_host = host_floats(z, z->param_n[COLO_HOME_HOST]);
  if (!z->scratch)
    z->scratch = host_floats(z, 4 * z->max_piece);
  if (!z->host_m || !z->host_v || !z->param_host || !z->scratch) {
    snprintf(err, errlen, "no host memory for the chunks placed off the device");
    return COLO_ENOMEM;
  }
  if (z->optim_n[COLO_HOME_NVME]) {
    const char *dir = pl->nvme_dir && pl->nvme_dir[0] ? pl->nvme_dir : NULL;
    if (!dir) {
      snprintf(err, errlen, "optimizer state on NVMe needs a directory (memory.nvme_dir)");
      return COLO_EINVAL;
    }
    snprintf(z->nvme_path, sizeof z->nvme_path, "%s/colo-optim-%d-rank%d.bin", dir, (int)getpid(),
             z->rank);
    off_t bytes = (off_t)(2 * z->optim_n[COLO_HOME_NVME] * sizeof(float));
    int prc = 0;
    if (colo_mkdirs(dir, 0700) < 0 ||
        (z->nvme_fd = open(z->nvme_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0 ||
        unlink(z->nvme_path) < 0 || ftruncate(z->nvme_fd, bytes) < 0 ||
        ((prc = posix_fallocate(z->nvme_fd, 0, bytes)) != 0 && prc != EOPNOTSUPP &&
         prc != EINVAL)) {
      snprintf(err, errlen, "optimizer state on NVMe: %s (%.1f MiB): %s", z->nvme_path,
               (double)bytes / (1 << 20), strerror(prc ? prc : errno));
      return COLO_EIO;
    }
  }
  return 0;
}

/* Moves every piece to the homes ph, oh (the device or host memory: NVMe pieces stay where they
 * are), keeping its values: new arrays are made, the pieces copied over, the old ones freed. */
static int rehome(colo_zero_t *z, colo_adamw_t *opt, const unsigned char *ph,
                  const unsigned char *oh, char *err, size_t errlen) {
  size_t n = z->chunks.n;
  for (size_t k = 0; k < n; k++)
    if ((z->optim_home[k] == COLO_HOME_NVME) != (oh[k] == COLO_HOME_NVME)) {
      snprintf(err, errlen, "optimizer pieces do not move to or from NVMe");
      return COLO_EINVAL;
    }
  colo_zero_drop_cache(z); /* only pieces move */
  /* Muon's pieces on the device have no second moments for its matrices (colo_zero_muon_pairs):
   * v is read whole into host memory, moved there, and laid out anew (vd: the device's part) */
  int mu = z->muon_chunk && !z->frozen;
  size_t old_od = z->optim_n[COLO_HOME_DEVICE];
  float *vold = mu ? host_floats(z, old_od) : NULL, *vd = NULL;
  if (mu && !vold) {
    snprintf(err, errlen, "moving pieces: no host memory");
    return COLO_ENOMEM;
  }
  if (mu)
    colo_adamw_v_get(opt, z->be, 0, old_od, vold);
  colo_zero_t old = *z;
  size_t nn = n ? n : 1;
  z->param_home = malloc(nn), z->optim_home = malloc(nn);
  z->param_off = malloc(nn * sizeof(size_t)), z->optim_off = malloc(nn * sizeof(size_t));
  if (!z->param_home || !z->optim_home || !z->param_off || !z->optim_off) {
    free(z->param_home), free(z->optim_home), free(z->param_off), free(z->optim_off);
    *z = old;
    host_free(z, vold);
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  memcpy(z->param_home, ph, n);
  memcpy(z->optim_home, oh, n);
  index_homes(z);
  size_t pd = z->param_n[COLO_HOME_DEVICE], ph_n = z->param_n[COLO_HOME_HOST];
  size_t od = z->optim_n[COLO_HOME_DEVICE], oh_n = z->optim_n[COLO_HOME_HOST];
  int s3 = z->stage == 3, fr = z->frozen; /* frozen: no optimizer pieces to move */
  z->param_piece = s3 ? colo_pool_alloc(z->pool, (pd ? pd : 1) * z->esz, "parameter pieces") : NULL;
  float *m =
      fr ? opt->m : colo_pool_alloc(z->pool, (od ? od : 1) * sizeof(float), "optimizer state");
  size_t *pairs = NULL, n_pairs = 0, vn = od;
  if (mu && (pairs = colo_zero_muon_pairs(z, &n_pairs)))
    vn = colo_adamw_v_floats(od, pairs, n_pairs);
  float *v = fr  ? opt->v
             : m ? colo_pool_alloc(z->pool, (vn ? vn : 1) * sizeof(float), "optimizer state")
                 : NULL;
  z->param_host = host_floats(z, piece_floats(z, ph_n));
  z->host_m = host_floats(z, oh_n);
  z->host_v = host_floats(z, oh_n);
  if (mu)
    vd = pairs ? host_floats(z, od) : NULL;
  if ((s3 && !z->param_piece) || !v || !z->param_host || !z->host_m || !z->host_v ||
      (mu && (!vd || colo_adamw_set_v(opt, v, od, pairs, n_pairs, err, errlen) < 0))) {
    snprintf(err, errlen, "moving pieces: %s",
             (s3 && !z->param_piece) || !v ? colo_pool_error(z->pool) : "no host memory");
    free(pairs);
    host_free(z, vold), host_free(z, vd);
    if (s3)
      colo_pool_free(z->pool, z->param_piece);
    if (!fr) {
      colo_pool_free(z->pool, m);
      colo_pool_free(z->pool, v);
    }
    host_free(z, z->param_host), host_free(z, z->host_m), host_free(z, z->host_v);
    free(z->param_home), free(z->optim_home), free(z->param_off), free(z->optim_off);
    *z = old; /* as it was */
    return COLO_ENOMEM;
  }
  for (size_t k = 0; k < n; k++) {
    size_t bytes = z->chunks.chunks[k].capacity / (size_t)z->dp * sizeof(float);
    if (s3)
      xcopy(z, piece_at(z, k), piece_at(&old, k), bytes / sizeof(float) * z->esz);
    if (fr || oh[k] == COLO_HOME_NVME)
      continue;
    int was = old.optim_home[k];
    size_t o = old.optim_off[k], o2 = z->optim_off[k];
    xcopy(z, (oh[k] == COLO_HOME_DEVICE ? m : z->host_m) + o2,
          (was == COLO_HOME_DEVICE ? opt->m : old.host_m) + o, bytes);
    xcopy(z, (oh[k] == COLO_HOME_DEVICE ? mu ? vd : v : z->host_v) + o2,
          (was == COLO_HOME_DEVICE ? mu ? vold : opt->v : old.host_v) + o, bytes);
  }
  if (mu) { /* the device's second moments into v, set out (colo_adamw_set_v) as Muon keeps them */
    colo_adamw_v_put(opt, z->be, 0, od, vd);
    free(pairs);
    host_free(z, vold), host_free(z, vd);
  }
  if (s3)
    colo_pool_free(z->pool, old.param_piece);
  if (!fr) {
    colo_pool_free(opt->pool, opt->m);
    if (!mu) /* Muon's old v went in colo_adamw_set_v */
      colo_pool_free(opt->pool, opt->v);
    opt->m = m, opt->v = v, opt->n = od;
  }
  host_free(z, old.param_host), host_free(z, old.host_m), host_free(z, old.host_v);
  free(old.param_home), free(old.optim_home), free(old.param_off), free(old.optim_off);
  return 0;
}

int colo_zero_place_auto(colo_zero_t *z, colo_adamw_t *opt, size_t room, char *err, size_t errlen) {
  size_t n = z->chunks.n, used = 0;
  unsigned char *ph = malloc(2 * (n ? n : 1)), *oh = ph ? ph + n : NULL;
  if (!ph) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  /* parameters first: a piece is read twice a step (forward and backward) and written once;
   * its optimizer state once */
  int full = 1;
  for (size_t k = 0; k < n; k++) {
    size_t bytes = z->chunks.chunks[k].capacity / (size_t)z->dp * z->esz;
    ph[k] = z->param_home[k];
    if (z->stage == 3 && ph[k] != COLO_HOME_DEVICE) {
      if (full && used + bytes <= room)
        ph[k] = COLO_HOME_DEVICE, used += bytes;
      else
        full = 0;
    }
  }
  full = 1;
  for (size_t k = 0; k < n; k++) {
    size_t bytes = 2 * z->chunks.chunks[k].capacity / (size_t)z->dp * sizeof(float);
    oh[k] = z->optim_home[k];
    if (!z->frozen && oh[k] == COLO_HOME_HOST && ph[k] == COLO_HOME_DEVICE) {
      if (full && used + bytes <= room)
        oh[k] = COLO_HOME_DEVICE, used += bytes;
      else
        full = 0;
    }
  }
  int rc = rehome(z, opt, ph, oh, err, errlen);
  free(ph);
  return rc;
}
