/* Checkpoint save, verify and load: safetensors files, a manifest with sha256 sums, atomic
 * rename. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "../../../common/error.h"
#include "../optim/muon.h"
#include "data.h"
#include "hf.h"
#include "safetensors.h"

#define MANIFEST "manifest.json"
#define FORMAT   "colo-checkpoint"
#define DPO_FILE "dpo_reference.safetensors"
#define DPO_KIND "dpo_reference"

/* a manifest's file entry that is not a shard of the model (DPO's reference table) */
static int extra_entry(const cJSON *it) {
  return cJSON_GetObjectItem(it, "kind") != NULL;
}

int colo_sha256_file(const char *path, char hex[65], uint64_t *bytes) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return COLO_EIO;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  unsigned char buf[1 << 16];
  size_t n;
  uint64_t total = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    EVP_DigestUpdate(ctx, buf, n);
    total += n;
  }
  int rerr = ferror(f);
  fclose(f);
  unsigned char md[32];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  if (rerr)
    return COLO_EIO;
  for (int i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
  *bytes = total;
  return 0;
}

static int fsync_path(const char *path, int dir) {
  int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* ---- manifest ---- */

static int parse_manifest(const char *dir, colo_ckpt_meta_t *meta, cJSON **files_out,
                          cJSON **root_out, char *err, size_t errlen) {
  char path[1200];
  snprintf(path, sizeof path, "%s/" MANIFEST, dir);
  FILE *f = fopen(path, "rb");
  if (!f)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO,
                     "checkpoint %s has no " MANIFEST ": it is incomplete", dir);
  /* all of it: a manifest lists a file per rank under ZeRO (about 170 bytes each), so a large
   * job's passes any fixed buffer (it was 64 KiB, some 380 ranks) */
  char *buf = NULL;
  size_t n = 0;
  int rrc = colo_read_all(f, path, &buf, &n, err, errlen);
  fclose(f);
  if (rrc < 0)
    return rrc;
  cJSON *root = strlen(buf) == n ? cJSON_Parse(buf) : NULL; /* a NUL inside: not JSON */
  free(buf);
  cJSON *fmt = root ? cJSON_GetObjectItem(root, "format") : NULL;
  if (!root || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) != 0) {
    cJSON_Delete(root);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: not a colo checkpoint manifest", path);
  }
  cJSON *m = cJSON_GetObjectItem(root, "model"), *mesh = cJSON_GetObjectItem(root, "mesh");
  cJSON *files = cJSON_GetObjectItem(root, "files");
  /* every field must be a non-negative integer below 2^53 before it is converted */
  const struct {
    cJSON *obj;
    const char *key;
    double min;
  } want[] = {{root, "step", 0},
              {cJSON_GetObjectItem(root, "data"), "seed", 0},
              {cJSON_GetObjectItem(root, "optimizer"), "t", 0},
              {m, "n_layer", 1},
              {m, "n_head", 1},
              {m, "n_embd", 1},
              {m, "block_size", 1},
              {m, "vocab_size", 1},
              {mesh, "dp", 1},
              {mesh, "tp", 1},
              {mesh, "pp", 1},
              {mesh, "world", 1}};
  double v[sizeof want / sizeof want[0]];
  int bad = !cJSON_IsArray(files);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    cJSON *x = want[i].obj ? cJSON_GetObjectItem(want[i].obj, want[i].key) : NULL;
    v[i] = cJSON_IsNumber(x) ? x->valuedouble : -1;
    if (!(v[i] >= want[i].min && v[i] < 9007199254740992.0) || v[i] != (double)(uint64_t)v[i])
      bad = 1;
  }
  cJSON *ls = cJSON_GetObjectItem(root, "loss_scale");
  if (!cJSON_IsNumber(ls) || !(ls->valuedouble > 0))
    bad = 1;
  colo_ckpt_meta_t t = {0};
  if (!bad) {
    t.step = (uint64_t)v[0];
    t.seed = (uint64_t)v[1];
    t.adam_t = (int)v[2];
    t.model.n_layer = (int)v[3];
    t.model.n_head = (int)v[4];
    t.model.n_embd = (int)v[5];
    t.model.block_size = (int)v[6];
    t.model.vocab_size = (int)v[7];
    t.dp = (int)v[8];
    t.tp = (int)v[9];
    t.pp = (int)v[10];
    t.world = (int)v[11];
    t.loss_scale = (float)ls->valuedouble;
    cJSON *zs = cJSON_GetObjectItem(mesh, "zero_stage"); /* absent before version 3 */
    t.zero = cJSON_IsNumber(zs) && zs->valuedouble >= 0 && zs->valuedouble <= 3
                 ? (int)zs->valuedouble
                 : 0;
    cJSON *lg = cJSON_GetObjectItem(root, "loss_scale_good_steps"); /* absent in older manifests */
    t.loss_scale_good = cJSON_IsNumber(lg) && lg->valuedouble >= 0 && lg->valuedouble < 1e9
                            ? (int)lg->valuedouble
                            : 0;
    t.asked = cJSON_IsTrue(cJSON_GetObjectItem(root, "asked")); /* absent: an interval's */
    /* the architecture (GPT-2 before LLAMA's blocks came), its MLP width (absent: 4C) and
     * RoPE's base */
    cJSON *ar = cJSON_GetObjectItem(m, "architecture"), *mh = cJSON_GetObjectItem(m, "mlp_hidden");
    cJSON *th = cJSON_GetObjectItem(m, "rope_theta"), *kv = cJSON_GetObjectItem(m, "n_kv_head");
    if (kv && !(cJSON_IsNumber(kv) && kv->valuedouble >= 1 && kv->valuedouble <= 1024))
      bad = 1;
    else
      t.model.n_kv_head = kv ? (int)kv->valuedouble : 0;
    /* Qwen2's: biases on q, k and v, and RMSNorm's eps (absent: none, and 1e-5) */
    cJSON *qb = cJSON_GetObjectItem(m, "qkv_bias"), *ne = cJSON_GetObjectItem(m, "rms_norm_eps");
    if ((qb && !cJSON_IsBool(qb)) ||
        (ne && !(cJSON_IsNumber(ne) && ne->valuedouble > 0 && ne->valuedouble <= 1e-2)))
      bad = 1;
    t.model.qkv_bias = cJSON_IsTrue(qb);
    cJSON *qn = cJSON_GetObjectItem(m, "qk_norm"); /* Qwen3's (absent: none) */
    if (qn && !cJSON_IsBool(qn))
      bad = 1;
    t.model.qk_norm = cJSON_IsTrue(qn);
    cJSON *hd = cJSON_GetObjectItem(m, "head_dim"); /* absent: n_embd/n_head */
    if (hd && !(cJSON_IsNumber(hd) && hd->valuedouble >= 1 && hd->valuedouble <= 65536 &&
                hd->valuedouble == (int)hd->valuedouble))
      bad = 1;
    t.model.head_dim = cJSON_IsNumber(hd) ? (int)hd->valuedouble : 0;
    cJSON *sw = cJSON_GetObjectItem(m, "sliding_window"); /* absent: none */
    if (sw && !(cJSON_IsNumber(sw) && sw->valuedouble >= 1 && sw->valuedouble <= (1 << 24) &&
                sw->valuedouble == (int)sw->valuedouble))
      bad = 1;
    t.model.sliding_window = cJSON_IsNumber(sw) ? (int)sw->valuedouble : 0;
    cJSON *hl = cJSON_GetObjectItem(m, "hf_layout"); /* absent: by the other fields */
    if (hl && !(cJSON_IsString(hl) && !strcmp(hl->valuestring, "phi3")))
      bad = 1;
    t.model.hf_phi3 = hl != NULL;
    t.model.norm_eps = cJSON_IsNumber(ne) ? (float)ne->valuedouble : 0.0f;
    cJSON *tie = cJSON_GetObjectItem(m, "tie_embeddings"); /* absent: tied */
    if (tie && !cJSON_IsBool(tie))
      bad = 1;
    t.model.untied_head = cJSON_IsFalse(tie);
    cJSON *rs = cJSON_GetObjectItem(m, "rope_scaling");
    cJSON *rt = cJSON_GetObjectItem(rs, "rope_type"); /* absent: Llama 3's */
    if (cJSON_IsString(rt) && !strcmp(rt->valuestring, "longrope")) {
      cJSON *sf = cJSON_GetObjectItem(rs, "short_factor"),
            *lf = cJSON_GetObjectItem(rs, "long_factor");
      cJSON *af = cJSON_GetObjectItem(rs, "attention_factor");
      cJSON *om = cJSON_GetObjectItem(rs, "original_max_position_embeddings");
      int n = cJSON_GetArraySize(sf);
      if (!cJSON_IsArray(sf) || !cJSON_IsArray(lf) || n < 1 || n > COLO_ROPE_EXT_MAX ||
          cJSON_GetArraySize(lf) != n || !cJSON_IsNumber(af) ||
          !(af->valuedouble >= 0 && af->valuedouble <= 100) || !cJSON_IsNumber(om) ||
          !(om->valuedouble >= 1 && om->valuedouble < 1e9))
        bad = 1;
      for (int i = 0; !bad && i < n; i++) {
        cJSON *s = cJSON_GetArrayItem(sf, i), *l = cJSON_GetArrayItem(lf, i);
        if (!cJSON_IsNumber(s) || !cJSON_IsNumber(l) || !(s->valuedouble > 0) ||
            !(l->valuedouble > 0))
          bad = 1;
        else
          t.model.rope_short[i] = (float)s->valuedouble,
          t.model.rope_long[i] = (float)l->valuedouble;
      }
      if (!bad) {
        t.model.rope_ext = n;
        t.model.rope_attn = (float)af->valuedouble;
        t.model.rope_orig = (int)om->valuedouble;
      }
    } else if (rs) {
      const char *k[4] = {"factor", "low_freq_factor", "high_freq_factor",
                          "original_max_position_embeddings"};
      double v4[4];
      for (int i = 0; i < 4; i++) {
        cJSON *x = cJSON_GetObjectItem(rs, k[i]);
        v4[i] = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!(v4[i] > 0 && v4[i] < 1e9))
          bad = 1;
      }
      t.model.rope_factor = (float)v4[0];
      t.model.rope_low = (float)v4[1];
      t.model.rope_high = (float)v4[2];
      t.model.rope_orig = (int)v4[3];
    }
    t.model.arch = cJSON_IsString(ar) ? colo_gpt_arch_parse(ar->valuestring) : COLO_ARCH_GPT2;
    if (t.model.arch < 0)
      bad = 1;
    if (mh && !(cJSON_IsNumber(mh) && mh->valuedouble >= 1 && mh->valuedouble <= 1 << 24))
      bad = 1;
    else
      t.model.mlp_hidden = mh ? (int)mh->valuedouble : 0;
    if (th && !(cJSON_IsNumber(th) && th->valuedouble > 0 && th->valuedouble < 1e12))
      bad = 1;
    else
      t.model.rope_theta = th ? (float)th->valuedouble : 0.0f;
    /* documents: absent when the run had none */
    cJSON *dt = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "data"), "document_token");
    if (dt && !(cJSON_IsNumber(dt) && dt->valuedouble >= 0 &&
                dt->valuedouble < t.model.vocab_size && dt->valuedouble == (int)dt->valuedouble))
      bad = 1;
    t.documents = dt != NULL;
    t.document_token = dt ? (int)dt->valuedouble : -1;
    /* LoRA: absent for a run of the whole model */
    cJSON *lo = cJSON_GetObjectItem(root, "lora");
    if (lo) {
      cJSON *r = cJSON_GetObjectItem(lo, "rank"), *al = cJSON_GetObjectItem(lo, "alpha"),
            *tg = cJSON_GetObjectItem(lo, "targets"), *bs = cJSON_GetObjectItem(lo, "base"),
            *qn = cJSON_GetObjectItem(lo, "quant"), *dr = cJSON_GetObjectItem(lo, "dropout"),
            *rs = cJSON_GetObjectItem(lo, "rslora"), *pr = cJSON_GetObjectItem(lo, "plus_ratio"),
            *dd = cJSON_GetObjectItem(lo, "dora"), *dq = cJSON_GetObjectItem(lo, "double_quant");
      char why[160];
      if (!cJSON_IsNumber(r) || !(r->valuedouble >= 1 && r->valuedouble <= 65536) ||
          r->valuedouble != (int)r->valuedouble || !cJSON_IsNumber(al) ||
          !(al->valuedouble > 0 && al->valuedouble < 1e9) || !cJSON_IsString(tg) ||
          colo_lora_targets_parse(tg->valuestring, &t.lora.targets, why, sizeof why) < 0 ||
          (bs && (!cJSON_IsString(bs) || strlen(bs->valuestring) >= sizeof t.lora_base)) ||
          (qn && (!cJSON_IsString(qn) || strcmp(qn->valuestring, "nf4"))) ||
          (dr && !(cJSON_IsNumber(dr) && dr->valuedouble >= 0 && dr->valuedouble < 1)) ||
          (rs && !cJSON_IsBool(rs)) || (dd && !cJSON_IsBool(dd)) ||
          (dq && (!cJSON_IsBool(dq) || !qn)) ||
          (pr && !(cJSON_IsNumber(pr) && pr->valuedouble >= 0 && pr->valuedouble <= 1024)))
        bad = 1;
      else {
        t.lora.plus_ratio = pr ? (float)pr->valuedouble : 0.0f;
        t.lora.rslora = rs && cJSON_IsTrue(rs);
        t.lora.dora = dd && cJSON_IsTrue(dd);
        t.lora.dropout = dr ? (float)dr->valuedouble : 0.0f;
        t.lora.quant = qn ? COLO_LORA_QUANT_NF4 : 0;
        t.lora.double_quant = dq && cJSON_IsTrue(dq);
        t.lora.rank = (int)r->valuedouble;
        t.lora.alpha = (float)al->valuedouble;
        snprintf(t.lora_base, sizeof t.lora_base, "%s", bs ? bs->valuestring : "");
      }
    }
    /* the optimizer: "adamw" (or absent, before Muon) or "muon" with its momentum */
    cJSON *ok = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "optimizer"), "kind"),
          *om = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "optimizer"), "momentum");
    if (ok && !(cJSON_IsString(ok) && (!strcmp(ok->valuestring, "adamw") ||
                                       (!strcmp(ok->valuestring, "muon") && cJSON_IsNumber(om) &&
                                        om->valuedouble >= 0 && om->valuedouble < 1))))
      bad = 1;
    else if (ok && !strcmp(ok->valuestring, "muon")) {
      t.muon = 1;
      t.muon_momentum = (float)om->valuedouble;
    }
    /* the weights' moving average (train.ema_decay): absent when it has none */
    cJSON *em = cJSON_GetObjectItem(root, "ema"), *ed = cJSON_GetObjectItem(em, "decay"),
          *eu = cJSON_GetObjectItem(em, "updates");
    if (em && !(cJSON_IsNumber(ed) && ed->valuedouble > 0 && ed->valuedouble < 1 &&
                cJSON_IsNumber(eu) && eu->valuedouble >= 1 && eu->valuedouble < 0x1p53))
      bad = 1;
    else if (em) {
      t.ema_decay = (float)ed->valuedouble;
      t.ema_updates = (uint64_t)eu->valuedouble;
    }
    /* the validation loss at its step, and early stopping's count: absent when there were none */
    cJSON *vl = cJSON_GetObjectItem(root, "val_loss");
    t.val_loss = cJSON_IsNumber(vl) && isfinite(vl->valuedouble) ? (float)vl->valuedouble : NAN;
    cJSON *sc = cJSON_GetObjectItem(root, "score"), *sv = cJSON_GetObjectItem(sc, "value"),
          *sn = cJSON_GetObjectItem(sc, "metric");
    if (cJSON_IsNumber(sv) && isfinite(sv->valuedouble) && cJSON_IsString(sn)) {
      t.has_score = 1;
      t.score = (float)sv->valuedouble;
      snprintf(t.score_name, sizeof t.score_name, "%s", sn->valuestring);
    }
    cJSON *sp = cJSON_GetObjectItem(root, "skip_spike"), *spn = cJSON_GetObjectItem(sp, "skipped"),
          *spl = cJSON_GetObjectItem(sp, "loss"), *spg = cJSON_GetObjectItem(sp, "norm");
    int spk = cJSON_GetArraySize(spl);
    if (sp &&
        (!cJSON_IsNumber(spn) || spn->valuedouble < 0 || !cJSON_IsArray(spl) ||
         !cJSON_IsArray(spg) || spk != cJSON_GetArraySize(spg) || spk > COLO_SPIKE_MAX_WINDOW))
      bad = 1;
    else if (sp) {
      t.spike_kept = 1;
      t.spike.skipped = (uint64_t)spn->valuedouble;
      t.spike.n = spk;
      for (int i = 0; i < spk; i++) { /* null: a value that was not finite */
        cJSON *a = cJSON_GetArrayItem(spl, i), *b = cJSON_GetArrayItem(spg, i);
        t.spike.loss[i] = cJSON_IsNumber(a) ? (float)a->valuedouble : NAN;
        t.spike.norm[i] = cJSON_IsNumber(b) ? (float)b->valuedouble : NAN;
      }
    }
    cJSON *es = cJSON_GetObjectItem(root, "early_stop");
    cJSON *eb = cJSON_GetObjectItem(es, "best"), *ebs = cJSON_GetObjectItem(es, "best_step"),
          *esn = cJSON_GetObjectItem(es, "since");
    if (cJSON_IsNumber(eb) && isfinite(eb->valuedouble) && cJSON_IsNumber(ebs) &&
        ebs->valuedouble >= 0 && ebs->valuedouble < 2e9 && cJSON_IsNumber(esn) &&
        esn->valuedouble >= 0 && esn->valuedouble < 2e9) {
      t.es_kept = 1;
      t.es_best = (float)eb->valuedouble;
      t.es_best_step = (int)ebs->valuedouble;
      t.es_since = (int)esn->valuedouble;
    }
  }
  if (bad) {
    cJSON_Delete(root);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: a required field is missing or malformed",
                     path);
  }
  cJSON *it;
  cJSON_ArrayForEach(it, files) {
    cJSON *kind = cJSON_GetObjectItem(it, "kind");
    t.dpo_reference |= cJSON_IsString(kind) && !strcmp(kind->valuestring, DPO_KIND);
  }
  *meta = t;
  *files_out = files;
  *root_out = root;
  return 0;
}

int colo_ckpt_read_meta(const char *dir, colo_ckpt_meta_t *meta, char *err, size_t errlen) {
  cJSON *files, *root;
  int rc = parse_manifest(dir, meta, &files, &root, err, errlen);
  if (rc == 0)
    cJSON_Delete(root);
  return rc;
}

/* A file entry of the manifest is well formed: a plain name, a size and a sha256. */
static int check_entry(const char *dir, cJSON *it, char *err, size_t errlen) {
  cJSON *name = cJSON_GetObjectItem(it, "name"), *sha = cJSON_GetObjectItem(it, "sha256"),
        *bytes = cJSON_GetObjectItem(it, "bytes");
  if (!cJSON_IsString(name) || !cJSON_IsString(sha) || !cJSON_IsNumber(bytes) ||
      strchr(name->valuestring, '/') || !strcmp(name->valuestring, "..") ||
      !(bytes->valuedouble >= 0))
    return colo_fail(err, errlen, COLO_EPARSE, "checkpoint %s: malformed file entry in " MANIFEST,
                     dir);
  return 0;
}

/* The file of entry `it` has its recorded size and sha256. */
static int verify_file(const char *dir, const char *name, double bytes, const char *sha, char *err,
                       size_t errlen) {
  char path[1400], hex[65];
  uint64_t got;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (colo_sha256_file(path, hex, &got) < 0)
    return colo_fail(err, errlen, COLO_EIO, "checkpoint %s: %s is missing or unreadable", dir,
                     name);
  if (got != (uint64_t)bytes)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "checkpoint %s: %s is %llu bytes but the manifest says %.0f: truncated or "
                     "altered",
                     dir, name, (unsigned long long)got, bytes);
  if (strcmp(hex, sha) != 0)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "checkpoint %s: %s does not match its sha256 in the manifest: altered", dir,
                     name);
  return 0;
}

/* Every file in the manifest has its recorded size and sha256. */
static int verify(const char *dir, cJSON *files, char *err, size_t errlen) {
  cJSON *it;
  cJSON_ArrayForEach(it, files) {
    int rc = check_entry(dir, it, err, errlen);
    if (rc == 0)
      rc = verify_file(dir, cJSON_GetObjectItem(it, "name")->valuestring,
                       cJSON_GetObjectItem(it, "bytes")->valuedouble,
                       cJSON_GetObjectItem(it, "sha256")->valuestring, err, errlen);
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* ---- save ---- */

/* Removes a checkpoint directory and the plain files in it. */
static void remove_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char p[1600];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(path);
}

static void tmp_dir(const char *root, uint64_t step, char *out, size_t len) {
  snprintf(out, len, "%s/.step_%08llu.tmp", root, (unsigned long long)step);
}

int colo_ckpt_begin(const char *root, uint64_t step, char *err, size_t errlen) {
  if (mkdir(root, 0755) != 0 && errno != EEXIST)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", root, strerror(errno));
  char tmp[1200];
  tmp_dir(root, step, tmp, sizeof tmp);
  remove_dir(tmp); /* a dead attempt's */
  if (mkdir(tmp, 0755) != 0)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", tmp, strerror(errno));
  return 0;
}

static const char *const PREFIX[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq.", "ema."};

/* what an entry of the file is: a whole tensor from memory, or part of range r's read of kind j */
typedef struct {
  const float *data;
  size_t r, off;
  int j;
} origin_t;

/* The entries of one file: whole tensors of the kinds that have a buffer, then each piece's
 * parts; with `out` NULL only counts them. */
static size_t plan_tensors(colo_gpt_t *model, const float *const whole[3],
                           const colo_ckpt_pieces_t *pc, colo_st_tensor_t *out, origin_t *org,
                           char (*names)[112]) {
  size_t nt, k = 0;
  const colo_param_t *table = colo_gpt_params_table(model, &nt);
  int tied, iw = colo_gpt_wte_index(model, &tied);
  for (int j = 0; j < 3; j++)
    for (size_t i = 0; whole[j] && i < nt; i++) {
      if (tied && (int)i == iw)
        continue; /* the last stage's copy of the embedding: the first stage's is written */
      if (out) {
        snprintf(names[k], sizeof names[0], "%s%s", PREFIX[j], table[i].name);
        out[k] = (colo_st_tensor_t){names[k],
                                    whole[j] + table[i].offset,
                                    table[i].ndim,
                                    {table[i].shape[0], table[i].shape[1]},
                                    table[i].numel};
        org[k] = (origin_t){whole[j] + table[i].offset, 0, 0, j};
      }
      k++;
    }
  for (size_t r = 0; pc && r < pc->n; r++)
    for (int j = 0; j < COLO_CKPT_KINDS; j++)
      for (size_t i = 0; (pc->kinds[r] >> j & 1) && i < nt; i++) {
        size_t a = table[i].offset, b = a + table[i].numel, lo = pc->lo[r], hi = pc->hi[r];
        if ((tied && (int)i == iw) || b <= lo || a >= hi ||
            (j == 2 && pc->muon && colo_muon_takes(&table[i])))
          continue;
        size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        if (out) {
          colo_st_tensor_t *e = &out[k];
          if (x == a && y == b) { /* all of it is in this piece: whole, under its own name */
            snprintf(names[k], sizeof names[0], "%s%s", PREFIX[j], table[i].name);
            *e = (colo_st_tensor_t){names[k],
                                    NULL,
                                    table[i].ndim,
                                    {table[i].shape[0], table[i].shape[1]},
                                    table[i].numel};
          } else {
            snprintf(names[k], sizeof names[0], "%s%s@%zu", PREFIX[j], table[i].name, x - a);
            *e = (colo_st_tensor_t){names[k], NULL, 1, {(int)(y - x), 0}, y - x};
          }
          org[k] = (origin_t){NULL, r, x - lo, j};
        }
        k++;
      }
  return k;
}

int colo_ckpt_write_tensors(const char *path, colo_gpt_t *model, const float *params,
                            const float *m, const float *v, const colo_ckpt_pieces_t *pieces,
                            char *err, size_t errlen) {
  const float *whole[3] = {params, m, v};
  size_t n = plan_tensors(model, whole, pieces, NULL, NULL, NULL);
  colo_st_tensor_t *ts = calloc(n ? n : 1, sizeof *ts);
  origin_t *org = calloc(n ? n : 1, sizeof *org);
  char(*names)[112] = calloc(n ? n : 1, sizeof *names);
  colo_st_writer_t w;
  int rc = ts && org && names ? 0 : colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  if (rc == 0) {
    plan_tensors(model, whole, pieces, ts, org, names);
    rc = colo_st_begin(&w, path, ts, n, err, errlen);
  }
  const float *got = NULL;
  size_t got_r = (size_t)-1;
  int got_j = -1;
  for (size_t k = 0; rc == 0 && k < n; k++) {
    const float *src = org[k].data;
    if (!src) { /* a piece's part: its range read once, for all the tensors it holds */
      if (org[k].r != got_r || org[k].j != got_j) {
        got_r = org[k].r;
        got_j = org[k].j;
        if (!(got = pieces->read(pieces->ctx, got_r, got_j, err, errlen)))
          rc = COLO_EIO;
      }
      src = got ? got + org[k].off : NULL;
    }
    if (rc == 0)
      rc = colo_st_put(&w, src, ts[k].numel, err, errlen);
  }
  if (rc == 0)
    rc = colo_st_finish(&w, err, errlen);
  else if (ts && org && names)
    colo_st_abort(&w);
  free(ts);
  free(org);
  free(names);
  return rc;
}

int colo_ckpt_write_shard(const char *root, uint64_t step, colo_gpt_t *model, const float *params,
                          const float *m, const float *v, const colo_ckpt_pieces_t *pieces,
                          int rank, char *err, size_t errlen) {
  char tmp[1200], file[1300];
  tmp_dir(root, step, tmp, sizeof tmp);
  snprintf(file, sizeof file, "%s/rank_%05d.safetensors", tmp, rank);
  return colo_ckpt_write_tensors(file, model, params, m, v, pieces, err, errlen);
}

/* the world rank that writes the file of pipeline stage s, tensor-parallel rank t and
 * data-parallel rank d (under ZeRO every d writes one; else d = 0 only) */
static int shard_writer(const colo_ckpt_meta_t *meta, int s, int t, int d) {
  return (s * meta->dp + d) * meta->tp + t;
}

void colo_ckpt_step_dir(const char *root, uint64_t step, char *out, size_t len) {
  snprintf(out, len, "%s/step_%08llu", root, (unsigned long long)step);
}

/* a float as JSON: null when not finite (JSON has no NaN) */
static cJSON *finite_or_null(float x) {
  return isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull();
}

int colo_ckpt_commit(const char *root, const colo_ckpt_meta_t *meta, char *path_out,
                     size_t path_len, char *err, size_t errlen) {
  char final[1100], tmp[1200], file[1300];
  colo_ckpt_step_dir(root, meta->step, final, sizeof final);
  tmp_dir(root, meta->step, tmp, sizeof tmp);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "format", FORMAT);
  cJSON_AddNumberToObject(m, "version", 3);
  cJSON_AddNumberToObject(m, "step", (double)meta->step);
  cJSON *mo = cJSON_AddObjectToObject(m, "model");
  cJSON_AddStringToObject(mo, "architecture", colo_gpt_arch_name(meta->model.arch));
  cJSON_AddNumberToObject(mo, "mlp_hidden", colo_gpt_mlp_hidden(&meta->model));
  if (meta->model.arch == COLO_ARCH_LLAMA) {
    cJSON_AddNumberToObject(mo, "rope_theta",
                            meta->model.rope_theta > 0 ? meta->model.rope_theta : 10000.0);
    cJSON_AddNumberToObject(mo, "n_kv_head", colo_gpt_kv_heads(&meta->model));
    cJSON_AddBoolToObject(mo, "tie_embeddings", !meta->model.untied_head);
    if (meta->model.qkv_bias)
      cJSON_AddTrueToObject(mo, "qkv_bias");
    if (meta->model.qk_norm)
      cJSON_AddTrueToObject(mo, "qk_norm");
    if (meta->model.head_dim)
      cJSON_AddNumberToObject(mo, "head_dim", meta->model.head_dim);
    if (meta->model.sliding_window)
      cJSON_AddNumberToObject(mo, "sliding_window", meta->model.sliding_window);
    if (meta->model.hf_phi3) /* the layout export writes (absent: by the other fields) */
      cJSON_AddStringToObject(mo, "hf_layout", "phi3");
    if (meta->model.norm_eps > 0.0f && meta->model.norm_eps != 1e-5f)
      cJSON_AddNumberToObject(mo, "rms_norm_eps", meta->model.norm_eps);
    if (meta->model.rope_ext) { /* LongRoPE's, as HF's config names it */
      cJSON *rs = cJSON_AddObjectToObject(mo, "rope_scaling");
      cJSON_AddStringToObject(rs, "rope_type", "longrope");
      for (int k = 0; k < 2; k++) {
        const float *x = k ? meta->model.rope_long : meta->model.rope_short;
        cJSON *a = cJSON_AddArrayToObject(rs, k ? "long_factor" : "short_factor");
        for (int i = 0; i < meta->model.rope_ext; i++)
          cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i])); /* a float in a double: exact */
      }
      cJSON_AddNumberToObject(rs, "attention_factor", meta->model.rope_attn);
      cJSON_AddNumberToObject(rs, "original_max_position_embeddings", meta->model.rope_orig);
    }
    if (meta->model.rope_factor > 0.0f) { /* Llama 3's rescaling, as HF's config names it */
      cJSON *rs = cJSON_AddObjectToObject(mo, "rope_scaling");
      cJSON_AddNumberToObject(rs, "factor", meta->model.rope_factor);
      cJSON_AddNumberToObject(rs, "low_freq_factor", meta->model.rope_low);
      cJSON_AddNumberToObject(rs, "high_freq_factor", meta->model.rope_high);
      cJSON_AddNumberToObject(rs, "original_max_position_embeddings", meta->model.rope_orig);
    }
  }
  cJSON_AddNumberToObject(mo, "n_layer", meta->model.n_layer);
  cJSON_AddNumberToObject(mo, "n_head", meta->model.n_head);
  cJSON_AddNumberToObject(mo, "n_embd", meta->model.n_embd);
  cJSON_AddNumberToObject(mo, "block_size", meta->model.block_size);
  cJSON_AddNumberToObject(mo, "vocab_size", meta->model.vocab_size);
  cJSON *mesh = cJSON_AddObjectToObject(m, "mesh");
  cJSON_AddNumberToObject(mesh, "dp", meta->dp);
  cJSON_AddNumberToObject(mesh, "tp", meta->tp);
  cJSON_AddNumberToObject(mesh, "pp", meta->pp);
  cJSON_AddNumberToObject(mesh, "world", meta->world);
  cJSON_AddNumberToObject(mesh, "zero_stage", meta->zero);
  /* sampling is a function of (seed, step): the data position is the step */
  cJSON *data = cJSON_AddObjectToObject(m, "data");
  cJSON_AddNumberToObject(data, "seed", (double)meta->seed);
  cJSON_AddNumberToObject(data, "next_step", (double)meta->step);
  if (meta->documents)
    cJSON_AddNumberToObject(data, "document_token", meta->document_token);
  cJSON *rng = cJSON_AddObjectToObject(m, "rng");
  cJSON_AddStringToObject(rng, "kind", "stateless: hash(seed, step, sequence)");
  cJSON *o = cJSON_AddObjectToObject(m, "optimizer");
  cJSON_AddStringToObject(o, "kind", meta->muon ? "muon" : "adamw");
  if (meta->muon) {
    char v[32]; /* as written: 0.95 */
    snprintf(v, sizeof v, "%.6g", (double)meta->muon_momentum);
    cJSON_AddNumberToObject(o, "momentum", strtod(v, NULL));
  }
  cJSON_AddNumberToObject(o, "t", meta->adam_t);
  if (meta->ema_updates) { /* ema.<name>: the weights' exponential moving average */
    char d[32];
    snprintf(d, sizeof d, "%.6g", (double)meta->ema_decay);
    cJSON *e = cJSON_AddObjectToObject(m, "ema");
    cJSON_AddNumberToObject(e, "decay", strtod(d, NULL));
    cJSON_AddNumberToObject(e, "updates", (double)meta->ema_updates);
  }
  cJSON_AddNumberToObject(m, "loss_scale", meta->loss_scale);
  cJSON_AddNumberToObject(m, "loss_scale_good_steps", meta->loss_scale_good);
  if (meta->asked)
    cJSON_AddTrueToObject(m, "asked");
  if (isfinite(meta->val_loss))
    cJSON_AddNumberToObject(m, "val_loss", meta->val_loss);
  if (meta->has_score && isfinite(meta->score)) {
    cJSON *sc = cJSON_AddObjectToObject(m, "score");
    cJSON_AddStringToObject(sc, "metric", meta->score_name);
    cJSON_AddNumberToObject(sc, "value", meta->score);
  }
  if (meta->spike_kept) { /* the floats exactly: a resumed run judges as this one would */
    cJSON *sp = cJSON_AddObjectToObject(m, "skip_spike");
    cJSON_AddNumberToObject(sp, "skipped", (double)meta->spike.skipped);
    cJSON *l = cJSON_AddArrayToObject(sp, "loss"), *g = cJSON_AddArrayToObject(sp, "norm");
    for (int i = 0; i < meta->spike.n; i++) {
      cJSON_AddItemToArray(l, finite_or_null(meta->spike.loss[i]));
      cJSON_AddItemToArray(g, finite_or_null(meta->spike.norm[i]));
    }
  }
  if (meta->es_kept && isfinite(meta->es_best)) {
    cJSON *es = cJSON_AddObjectToObject(m, "early_stop");
    cJSON_AddNumberToObject(es, "best", meta->es_best);
    cJSON_AddNumberToObject(es, "best_step", meta->es_best_step);
    cJSON_AddNumberToObject(es, "since", meta->es_since);
  }
  if (meta->lora.rank > 0) {
    char tg[96];
    cJSON *lo = cJSON_AddObjectToObject(m, "lora");
    cJSON_AddNumberToObject(lo, "rank", meta->lora.rank);
    cJSON_AddNumberToObject(lo, "alpha", meta->lora.alpha);
    cJSON_AddStringToObject(lo, "targets",
                            colo_lora_targets_name(meta->lora.targets, tg, sizeof tg));
    if (meta->lora_base[0])
      cJSON_AddStringToObject(lo, "base", meta->lora_base);
    if (meta->lora.quant == COLO_LORA_QUANT_NF4)
      cJSON_AddStringToObject(lo, "quant", "nf4");
    if (meta->lora.quant == COLO_LORA_QUANT_NF4 && meta->lora.double_quant)
      cJSON_AddBoolToObject(lo, "double_quant", 1);
    if (meta->lora.rslora)
      cJSON_AddBoolToObject(lo, "rslora", 1);
    if (meta->lora.dora)
      cJSON_AddBoolToObject(lo, "dora", 1);
    if (meta->lora.dropout > 0.0f)
      cJSON_AddNumberToObject(lo, "dropout", colo_lora_dropout_decimal(&meta->lora));
    if (meta->lora.plus_ratio > 0.0f && meta->lora.plus_ratio != 1.0f) { /* as written: 16, 2.5 */
      char v[32];
      snprintf(v, sizeof v, "%.6g", (double)meta->lora.plus_ratio);
      cJSON_AddNumberToObject(lo, "plus_ratio", strtod(v, NULL));
    }
  }
  cJSON *files = cJSON_AddArrayToObject(m, "files");
  int rc = 0;
  /* a LoRA checkpoint is one file, whatever the mesh: rank 0 gathers the adapters */
  int writers = meta->zero > 0 ? meta->dp : 1, lora = meta->lora.rank > 0;
  for (int st = 0; st < (lora ? 1 : meta->pp) && rc == 0; st++)
    for (int t = 0; t < (lora ? 1 : meta->tp) && rc == 0; t++)
      for (int d = 0; d < writers && rc == 0; d++) {
        char fname[64], hex[65];
        uint64_t bytes = 0;
        snprintf(fname, sizeof fname, "rank_%05d.safetensors", shard_writer(meta, st, t, d));
        snprintf(file, sizeof file, "%s/%s", tmp, fname);
        if (colo_sha256_file(file, hex, &bytes) < 0 || fsync_path(file, 0) != 0) {
          rc = colo_fail(err, errlen, COLO_EIO, "%s: missing or unreadable", file);
          break;
        }
        cJSON *fe = cJSON_CreateObject();
        cJSON_AddStringToObject(fe, "name", fname);
        cJSON_AddNumberToObject(fe, "bytes", (double)bytes);
        cJSON_AddStringToObject(fe, "sha256", hex);
        cJSON_AddNumberToObject(fe, "pp", st);
        cJSON_AddNumberToObject(fe, "tp", t);
        cJSON_AddNumberToObject(fe, "dp", d);
        cJSON_AddItemToArray(files, fe);
      }
  if (rc == 0 && meta->dpo_reference) {
    char hex[65];
    uint64_t bytes = 0;
    snprintf(file, sizeof file, "%s/" DPO_FILE, tmp);
    if (colo_sha256_file(file, hex, &bytes) < 0 || fsync_path(file, 0) != 0)
      rc = colo_fail(err, errlen, COLO_EIO, "%s: missing or unreadable", file);
    else {
      cJSON *fe = cJSON_CreateObject();
      cJSON_AddStringToObject(fe, "name", DPO_FILE);
      cJSON_AddNumberToObject(fe, "bytes", (double)bytes);
      cJSON_AddStringToObject(fe, "sha256", hex);
      cJSON_AddStringToObject(fe, "kind", DPO_KIND);
      cJSON_AddItemToArray(files, fe);
    }
  }
  char *txt = rc == 0 ? cJSON_Print(m) : NULL;
  cJSON_Delete(m);
  if (rc == 0) {
    snprintf(file, sizeof file, "%s/" MANIFEST, tmp);
    FILE *f = fopen(file, "wb");
    int ok =
        f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f)
      fclose(f);
    if (!ok)
      rc = colo_fail(err, errlen, COLO_EIO, "%s: %s", file, strerror(errno));
  }
  cJSON_free(txt);
  if (rc == 0 && fsync_path(tmp, 1) != 0)
    rc = colo_fail(err, errlen, COLO_EIO, "%s: fsync: %s", tmp, strerror(errno));
  if (rc == 0) {
    /* a directory of the same step left by an earlier run is replaced */
    remove_dir(final);
    if (rename(tmp, final) != 0)
      rc = colo_fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", tmp, final, strerror(errno));
    else if (fsync_path(root, 1) != 0)
      rc = colo_fail(err, errlen, COLO_EIO, "%s: fsync: %s", root, strerror(errno));
  }
  if (rc < 0) {
    remove_dir(tmp);
    return rc;
  }
  snprintf(path_out, path_len, "%s", final);
  return 0;
}

void colo_ckpt_abandon(const char *root, uint64_t step) {
  char tmp[1200];
  tmp_dir(root, step, tmp, sizeof tmp);
  remove_dir(tmp);
}

/* ---- load: any layout's shards into any other's ---- */

/* Where a model's tensors come from: the files of a pipeline of `pp` stages of `tp`
 * tensor-parallel ranks each (pp = tp = 1: one file of whole tensors), each file at its place
 * (stage, tensor-parallel rank), opened when first needed. A place has one file, or under ZeRO
 * one per data-parallel rank, whose tensors are whole or slices (colo_ckpt_write_tensors).
 * Names in the files are the model's, or without "transformer." (strip). */
typedef struct {
  int st, t, d; /* its place, and its data-parallel rank there */
  char path[1400];
  /* a checkpoint's: each file is checked against its manifest entry when first opened, so a
   * rank reads (and hashes) only the shards it needs */
  char sha[65];
  double bytes;
  int open;
  colo_st_file_t f;
} source_file_t;

typedef struct {
  int pp, tp, n_layer;
  int strip, any_float;
  int muon; /* a Muon run's checkpoint: its tensors' second moments are zero, and not written */
  int ema;  /* it holds the weights' moving average (ema.<name>) */
  const char *dir; /* a checkpoint's directory; NULL: files without a manifest */
  source_file_t *file;
  size_t n;
} source_t;

static void source_close(source_t *s) {
  for (size_t i = 0; i < s->n; i++)
    if (s->file[i].open)
      colo_st_close(&s->file[i].f);
  free(s->file);
  memset(s, 0, sizeof *s);
}

static int source_init(source_t *s, int pp, int tp, int n_layer, size_t nfiles) {
  memset(s, 0, sizeof *s);
  s->pp = pp;
  s->tp = tp;
  s->n_layer = n_layer;
  s->file = calloc(nfiles ? nfiles : 1, sizeof *s->file);
  return s->file ? 0 : COLO_ENOMEM;
}

/* Opens (and for a checkpoint verifies) the files of place (st, t); how many there are. */
static int source_open_place(source_t *s, int st, int t, char *err, size_t errlen) {
  int found = 0;
  for (size_t i = 0; i < s->n; i++) {
    source_file_t *x = &s->file[i];
    if (x->st != st || x->t != t)
      continue;
    found++;
    if (x->open)
      continue;
    int rc = 0;
    if (s->dir) {
      const char *slash = strrchr(x->path, '/');
      rc = verify_file(s->dir, slash ? slash + 1 : x->path, x->bytes, x->sha, err, errlen);
    }
    if (rc == 0)
      rc = colo_st_open(x->path, &x->f, err, errlen);
    if (rc < 0)
      return rc;
    x->open = 1;
  }
  return found;
}

typedef struct {
  const colo_st_file_t *f;
  const char *key;
  size_t start, n;
} slice_t;

static int slice_cmp(const void *a, const void *b) {
  const slice_t *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

/* Elements [lo, hi) of tensor `name` of place (st, t), shaped as p, into dst: from the whole
 * tensor in one of its files, or from the slices `name@<start>` its files hold, which must tile
 * it exactly; only the slices that hold part of the range are read. */
static int source_tensor(source_t *s, int st, int t, const char *name, const colo_param_t *p,
                         size_t lo, size_t hi, float *dst, char *err, size_t errlen) {
  int rc = source_open_place(s, st, t, err, errlen);
  if (rc < 0)
    return rc;
  const source_file_t *first = NULL;
  for (size_t i = 0; i < s->n; i++) {
    const source_file_t *x = &s->file[i];
    if (x->st != st || x->t != t)
      continue;
    first = first ? first : x;
    const char *dt, *data;
    int nd;
    long shape[2];
    size_t bytes;
    if (colo_st_entry(&x->f, name, &dt, &nd, shape, &data, &bytes) == 0)
      return colo_st_get_part(&x->f, name, p->ndim, p->shape, lo, hi, dst, s->any_float, err,
                              errlen);
  }
  if (!first)
    return colo_fail(err, errlen, COLO_EPARSE, "no file holds stage %d, tensor-parallel rank %d",
                     st, t);
  size_t len = strlen(name), n = 0, cap = 0;
  slice_t *sl = NULL;
  for (size_t i = 0; i < s->n; i++) {
    const source_file_t *x = &s->file[i];
    if (x->st != st || x->t != t)
      continue;
    for (cJSON *it = x->f.hdr->child; it; it = it->next) {
      const char *k = it->string, *dt, *data;
      if (strncmp(k, name, len) != 0 || k[len] != '@' || k[len + 1] < '0' || k[len + 1] > '9')
        continue;
      char *end;
      unsigned long long start = strtoull(k + len + 1, &end, 10);
      int nd;
      long shape[2];
      size_t bytes;
      if (*end || colo_st_entry(&x->f, k, &dt, &nd, shape, &data, &bytes) < 0 || nd != 1) {
        free(sl);
        return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s has a malformed entry", x->f.path,
                         k);
      }
      if (n == cap) {
        slice_t *g = realloc(sl, (cap = cap ? 2 * cap : 8) * sizeof *sl);
        if (!g) {
          free(sl);
          return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
        }
        sl = g;
      }
      sl[n++] = (slice_t){&x->f, k, (size_t)start, (size_t)shape[0]};
    }
  }
  if (!n) /* neither whole nor in slices: the file's own message */
    return colo_st_get(&first->f, name, p->ndim, p->shape, dst, s->any_float, err, errlen);
  qsort(sl, n, sizeof *sl, slice_cmp);
  size_t at = 0;
  for (size_t i = 0; i < n && rc >= 0; i++) {
    if (sl[i].start != at || sl[i].n > p->numel - at) {
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s: the slices of tensor %s overlap, leave a gap or run past its %zu "
                     "elements",
                     sl[i].f->path, name, p->numel);
      break;
    }
    int shape[2] = {(int)sl[i].n, 0};
    size_t x = at > lo ? at : lo, y = at + sl[i].n < hi ? at + sl[i].n : hi;
    if (x < y)
      rc = colo_st_get_part(sl[i].f, sl[i].key, 1, shape, x - at, y - at, dst + (x - lo),
                            s->any_float, err, errlen);
    at += sl[i].n;
  }
  if (rc >= 0 && at != p->numel)
    rc = colo_fail(err, errlen, COLO_EPARSE,
                   "%s: the slices of tensor %s hold %zu of its %zu elements", first->f.path, name,
                   at, p->numel);
  free(sl);
  return rc < 0 ? rc : 0;
}

/* the stage of the source's pipeline that holds full tensor `name` */
static int source_stage(const source_t *s, const char *name) {
  int layer;
  if (sscanf(name, "transformer.h.%d.", &layer) == 1) {
    for (int st = 0; st < s->pp; st++)
      if (layer < (st + 1) * s->n_layer / s->pp)
        return st;
    return s->pp - 1;
  }
  /* the final norm and an untied head: the last stage; the embeddings: the first */
  return strstr(name, "ln_f.") || !strcmp(name, "lm_head.weight") ? s->pp - 1 : 0;
}

/* The name tensor f of the model has in the source's files, under prefix ("" or a moment's). */
static void source_name(const source_t *s, const colo_param_t *f, const char *prefix, char *out,
                        size_t len) {
  const char *n = s->strip && !strncmp(f->name, "transformer.", 12) ? f->name + 12 : f->name;
  snprintf(out, len, "%s%s", prefix, n);
}

/* Full tensor f of the whole model (prefix: "" or a moment's) into full, from the source's
 * shards of it; piece is scratch of f's size. */
static int assemble(source_t *s, const colo_param_t *f, const char *prefix, float *full,
                    float *piece, char *err, size_t errlen) {
  int st = source_stage(s, f->name);
  char name[160];
  source_name(s, f, prefix, name, sizeof name);
  for (int t = 0; t < s->tp; t++) {
    colo_param_t p;
    colo_param_shard(f, s->tp, &p);
    float *dst = s->tp == 1 ? full : piece;
    int rc = source_tensor(s, st, t, name, &p, 0, p.numel, dst, err, errlen);
    if (rc < 0)
      return rc;
    for (size_t li = 0; s->tp > 1 && li < p.numel; li++)
      full[colo_param_full_index(&p, t, s->tp, li)] = piece[li];
  }
  return 0;
}

/* This rank's tensors (its stage's, its tensor-parallel shard) of the kinds the sink takes, one
 * tensor at a time in the model's local layout, from the source. */
static int source_load(source_t *s, colo_gpt_t *model, const colo_ckpt_sink_t *sink, char *err,
                       size_t errlen) {
  size_t nt, nf, biggest = 0;
  const colo_param_t *table = colo_gpt_params_table(model, &nt);
  const colo_param_t *full = colo_gpt_full_table(model, &nf);
  for (size_t i = 0; i < nf; i++)
    biggest = full[i].numel > biggest ? full[i].numel : biggest;
  int tp = colo_gpt_tp_size(model), me = colo_gpt_tp_rank(model);
  float *whole = malloc(biggest * sizeof(float)), *piece = malloc(biggest * sizeof(float));
  float *cut = malloc(biggest * sizeof(float));
  int rc = whole && piece && cut ? 0 : colo_fail(err, errlen, COLO_ENOMEM, "out of memory loading");
  for (size_t i = 0; rc == 0 && i < nt; i++) {
    const colo_param_t *q = &table[i], *f = NULL;
    for (size_t j = 0; j < nf && !f; j++)
      f = full[j].full_offset == q->full_offset ? &full[j] : NULL;
    for (int j = 0; rc == 0 && j < COLO_CKPT_KINDS; j++) {
      size_t lo = 0, hi = q->numel;
      if (!(sink->kinds >> j & 1) || (j == COLO_CKPT_EMA && !s->ema))
        continue; /* a moving average asked of a checkpoint without: the caller's to refuse */
      if (sink->want)
        sink->want(sink->ctx, j, q->offset, q->numel, &lo, &hi);
      if (lo >= hi)
        continue;
      if (j == 2 && s->muon && colo_muon_takes(f)) { /* not written: zero */
        memset(cut, 0, (hi - lo) * sizeof(float));
        sink->put(sink->ctx, j, q->offset + lo, cut, hi - lo);
        continue;
      }
      if (s->tp == tp) { /* the same split: this rank's shard as the file has it, the part */
        char name[160];
        source_name(s, f, PREFIX[j], name, sizeof name);
        rc = source_tensor(s, source_stage(s, f->name), me, name, q, lo, hi, cut, err, errlen);
      } else { /* another split: the whole tensor put together, then cut to this rank's */
        rc = assemble(s, f, PREFIX[j], whole, piece, err, errlen);
        for (size_t li = lo; rc == 0 && li < hi; li++)
          cut[li - lo] = whole[colo_param_full_index(q, me, tp, li)];
      }
      if (rc == 0)
        sink->put(sink->ctx, j, q->offset + lo, cut, hi - lo);
    }
  }
  free(whole);
  free(piece);
  free(cut);
  return rc;
}

/* the plain sink: host buffers of the model's layout */
typedef struct {
  float *dst[COLO_CKPT_KINDS];
} host_sink_t;

static void host_put(void *ctx, int what, size_t off, const float *v, size_t n) {
  memcpy(((host_sink_t *)ctx)->dst[what] + off, v, n * sizeof(float));
}

int colo_ckpt_load(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model, float *params,
                   colo_adamw_t *opt, char *err, size_t errlen) {
  host_sink_t h = {
      {params ? params : colo_gpt_params(model), opt ? opt->m : NULL, opt ? opt->v : NULL}};
  colo_ckpt_sink_t sink = {opt ? 7 : 1, host_put, NULL, &h};
  int rc = colo_ckpt_load_to(dir, meta, model, &sink, err, errlen);
  if (rc == 0 && opt)
    opt->t = meta->adam_t;
  return rc;
}

int colo_ckpt_load_ema(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model, float *params,
                       char *err, size_t errlen) {
  host_sink_t h = {{NULL, NULL, NULL, params ? params : colo_gpt_params(model)}};
  colo_ckpt_sink_t sink = {1 << COLO_CKPT_EMA, host_put, NULL, &h};
  int rc = colo_ckpt_load_to(dir, meta, model, &sink, err, errlen); /* none: nothing put */
  if (rc == 0 && !meta->ema_updates)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s holds no moving average of its weights: its run had no "
                   "train.ema_decay",
                   dir);
  return rc;
}

/* RMSNorm's eps as a model uses it (0: 1e-5) */
static float norm_eps_of(const colo_gpt_config_t *c) {
  return c->norm_eps > 0.0f ? c->norm_eps : 1e-5f;
}

int colo_ckpt_load_to(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model,
                      const colo_ckpt_sink_t *sink, char *err, size_t errlen) {
  cJSON *files, *root;
  colo_ckpt_meta_t t;
  int rc = parse_manifest(dir, &t, &files, &root, err, errlen);
  if (rc < 0)
    return rc;
  cJSON *it;
  cJSON_ArrayForEach(it, files) {
    if (rc == 0)
      rc = check_entry(dir, it, err, errlen);
  }
  if (rc == 0 && t.lora.rank > 0)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s holds LoRA adapters (rank %d), not a whole model: a LoRA run "
                   "(train.lora_rank) goes on training them; `colo-train export --checkpoint %s "
                   "--out model.safetensors` writes the model with them merged, which "
                   "train.init_from takes",
                   dir, t.lora.rank, dir);
  const colo_gpt_config_t *c = colo_gpt_config(model);
  float th_c = c->rope_theta > 0 ? c->rope_theta : 10000.0f;
  float th_t = t.model.rope_theta > 0 ? t.model.rope_theta : 10000.0f;
  /* the rotation: its base, and Llama 3's rescaling when either has one */
  int rope_differs = c->arch == COLO_ARCH_LLAMA &&
                     (th_c != th_t || c->rope_factor != t.model.rope_factor ||
                      (c->rope_factor > 0 &&
                       (c->rope_low != t.model.rope_low || c->rope_high != t.model.rope_high ||
                        c->rope_orig != t.model.rope_orig)));
  /* and LongRoPE's, divisors, attention factor and original context */
  rope_differs =
      rope_differs ||
      (c->arch == COLO_ARCH_LLAMA &&
       (c->rope_ext != t.model.rope_ext ||
        (c->rope_ext &&
         (c->rope_attn != t.model.rope_attn || c->rope_orig != t.model.rope_orig ||
          memcmp(c->rope_short, t.model.rope_short, (size_t)c->rope_ext * sizeof(float)) ||
          memcmp(c->rope_long, t.model.rope_long, (size_t)c->rope_ext * sizeof(float))))));
  if (rc == 0 && (c->n_layer != t.model.n_layer || c->n_head != t.model.n_head ||
                  c->n_embd != t.model.n_embd || c->block_size != t.model.block_size ||
                  c->vocab_size != t.model.vocab_size ||
                  colo_gpt_head_size(c) != colo_gpt_head_size(&t.model)))
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s is of a %d-layer, %d-head, %d-wide model with heads of %d, block "
                   "%d and vocab %d; this run's model differs",
                   dir, t.model.n_layer, t.model.n_head, t.model.n_embd,
                   colo_gpt_head_size(&t.model), t.model.block_size, t.model.vocab_size);
  char eps_ck[48] = "", eps_run[48] = ""; /* named only where they differ */
  if (norm_eps_of(c) != norm_eps_of(&t.model)) {
    snprintf(eps_ck, sizeof eps_ck, ", RMSNorm eps %g", (double)norm_eps_of(&t.model));
    snprintf(eps_run, sizeof eps_run, ", eps %g", (double)norm_eps_of(c));
  }
  if (rc == 0 &&
      (c->arch != t.model.arch || colo_gpt_mlp_hidden(c) != colo_gpt_mlp_hidden(&t.model) ||
       colo_gpt_kv_heads(c) != colo_gpt_kv_heads(&t.model) ||
       !c->untied_head != !t.model.untied_head || rope_differs ||
       !c->qkv_bias != !t.model.qkv_bias || !c->qk_norm != !t.model.qk_norm || eps_ck[0]))
    rc =
        colo_fail(err, errlen, COLO_EINVAL,
                  "checkpoint %s is of a %s model with MLP width %d and %d key heads%s%s%s%s%s; "
                  "this run's is %s with %d and %d%s%s%s%s (model.arch, mlp_hidden, n_kv_head, "
                  "tie_embeddings, qkv_bias, qk_norm, rms_norm_eps, rope_theta, rope_scaling_*, "
                  "rope_*_factor)",
                  dir, colo_gpt_arch_name(t.model.arch), colo_gpt_mlp_hidden(&t.model),
                  colo_gpt_kv_heads(&t.model), t.model.untied_head ? ", untied" : "",
                  t.model.qkv_bias ? ", q, k and v biases" : "", t.model.qk_norm ? ", QK-norm" : "",
                  rope_differs ? " and another rotation" : "", eps_ck, colo_gpt_arch_name(c->arch),
                  colo_gpt_mlp_hidden(c), colo_gpt_kv_heads(c), c->untied_head ? ", untied" : "",
                  c->qkv_bias ? ", q, k and v biases" : "", c->qk_norm ? ", QK-norm" : "", eps_run);
  if (rc == 0 && c->sliding_window != t.model.sliding_window)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s's attention window is %d tokens; this run's is %d "
                   "(model.sliding_window; 0: every earlier token)",
                   dir, t.model.sliding_window, c->sliding_window);
  /* version 1 wrote one file of whole tensors whatever the mesh; version 2 a shard per stage
   * and tensor-parallel rank, each file naming its place; version 3 adds, under ZeRO, a file per
   * data-parallel rank of each place, holding slices of the moments (and at stage 3 of the
   * parameters) */
  cJSON *ver = cJSON_GetObjectItem(root, "version");
  int v2 = cJSON_IsNumber(ver) && ver->valuedouble >= 2;
  source_t s = {0};
  if (rc == 0 && source_init(&s, v2 ? t.pp : 1, v2 ? t.tp : 1, t.model.n_layer,
                             (size_t)cJSON_GetArraySize(files)) < 0)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  s.dir = dir;
  s.muon = t.muon;
  s.ema = t.ema_updates > 0;
  cJSON_ArrayForEach(it, files) {
    if (rc < 0)
      break;
    if (extra_entry(it))
      continue;
    cJSON *name = cJSON_GetObjectItem(it, "name"), *pp = cJSON_GetObjectItem(it, "pp"),
          *tp = cJSON_GetObjectItem(it, "tp"), *dpi = cJSON_GetObjectItem(it, "dp");
    int st = v2 && cJSON_IsNumber(pp) ? (int)pp->valuedouble : 0;
    int tr = v2 && cJSON_IsNumber(tp) ? (int)tp->valuedouble : 0;
    int d = cJSON_IsNumber(dpi) ? (int)dpi->valuedouble : 0;
    int dup = 0;
    for (size_t i = 0; i < s.n; i++)
      dup |= s.file[i].st == st && s.file[i].t == tr && s.file[i].d == d;
    if ((v2 && (!cJSON_IsNumber(pp) || !cJSON_IsNumber(tp))) || st < 0 || st >= s.pp || tr < 0 ||
        tr >= s.tp || d < 0 || d >= (t.dp > 0 ? t.dp : 1) || dup) {
      rc = colo_fail(err, errlen, COLO_EPARSE, "checkpoint %s: a file's place in the mesh is wrong",
                     dir);
      break;
    }
    source_file_t *x = &s.file[s.n++];
    x->st = st;
    x->t = tr;
    x->d = d;
    snprintf(x->path, sizeof x->path, "%s/%s", dir, name->valuestring);
    snprintf(x->sha, sizeof x->sha, "%s", cJSON_GetObjectItem(it, "sha256")->valuestring);
    x->bytes = cJSON_GetObjectItem(it, "bytes")->valuedouble;
  }
  for (int st = 0; rc == 0 && st < s.pp; st++)
    for (int tr = 0; rc == 0 && tr < s.tp; tr++) {
      int have = 0;
      for (size_t i = 0; i < s.n; i++)
        have |= s.file[i].st == st && s.file[i].t == tr;
      if (!have)
        rc = colo_fail(err, errlen, COLO_EPARSE,
                       "checkpoint %s: no file of stage %d, tensor-parallel rank %d is listed", dir,
                       st, tr);
    }
  cJSON_Delete(root);
  if (rc == 0)
    rc = source_load(&s, model, sink, err, errlen);
  source_close(&s);
  if (rc == 0)
    *meta = t;
  return rc;
}

/* ---- initial weights (train.init_from) ---- */

static const char *const BLOCK_TENSORS[] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

/* What a GPT-2 file's tensor `n` (its "transformer." prefix removed) is: 1 a parameter (of
 * block *layer, or -1 outside the blocks), 2 an attention-mask buffer that older files carry
 * (skipped), 0 not part of GPT-2. */
static int gpt2_kind(const char *n, long *layer) {
  *layer = -1;
  if (!strcmp(n, "wte.weight") || !strcmp(n, "wpe.weight") || !strcmp(n, "ln_f.weight") ||
      !strcmp(n, "ln_f.bias"))
    return 1;
  if (strncmp(n, "h.", 2) != 0 || n[2] < '0' || n[2] > '9')
    return 0;
  char *end;
  *layer = strtol(n + 2, &end, 10);
  if (*end != '.' || *layer > 100000)
    return 0;
  const char *t = end + 1;
  if (!strcmp(t, "attn.bias") || !strcmp(t, "attn.masked_bias"))
    return 2;
  for (size_t i = 0; i < sizeof BLOCK_TENSORS / sizeof BLOCK_TENSORS[0]; i++)
    if (!strcmp(t, BLOCK_TENSORS[i]))
      return 1;
  return 0;
}

/* The file's model against this one: its layers (one past the highest block), the embedding's
 * [vocab, width] and the positions' rows; and lm_head.weight, if there, equal to the embedding. */
static int gpt2_check_shape(const colo_st_file_t *f, const char *pre, const colo_gpt_config_t *c,
                            char *err, size_t errlen) {
  const char *path = f->path;
  long layers = 0;
  int has_lm_head = 0;
  for (cJSON *it = f->hdr->child; it; it = it->next) {
    const char *n = it->string;
    if (!strcmp(n, "__metadata__") || !strncmp(n, "optimizer.", 10))
      continue; /* colo's own checkpoints carry the moments: not taken */
    if (!strcmp(n, "lm_head.weight")) {
      has_lm_head = 1;
      continue;
    }
    size_t pl = strlen(pre);
    long layer;
    if (strncmp(n, pre, pl) != 0 || !gpt2_kind(n + pl, &layer))
      return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s is not part of a GPT-2 model", path,
                       n);
    layers = layer + 1 > layers ? layer + 1 : layers;
  }
  char name[96];
  const char *dt, *data;
  int nd;
  long wte[2] = {0, 0}, wpe[2] = {0, 0};
  size_t bytes;
  snprintf(name, sizeof name, "%swte.weight", pre);
  int ok = colo_st_entry(f, name, &dt, &nd, wte, &data, &bytes) == 0 && nd == 2;
  snprintf(name, sizeof name, "%swpe.weight", pre);
  ok = ok && colo_st_entry(f, name, &dt, &nd, wpe, &data, &bytes) == 0 && nd == 2;
  if (!ok)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "%s: wte.weight or wpe.weight is missing or malformed", path);
  if (layers != c->n_layer || wte[0] != c->vocab_size || wte[1] != c->n_embd ||
      wpe[0] != c->block_size)
    return colo_fail(
        err, errlen, COLO_EINVAL,
        "%s holds a GPT-2 of %ld layers, width %ld, vocab %ld and block %ld; this run's "
        "model has %d, %d, %d and %d (model.n_layer, n_embd, vocab_size, block_size)",
        path, layers, wte[1], wte[0], wpe[0], c->n_layer, c->n_embd, c->vocab_size, c->block_size);
  if (has_lm_head) { /* GPT-2 ties the head to the token embedding: a file must too */
    const char *hd, *hdata, *edata;
    long hs[2];
    size_t hbytes, ebytes;
    snprintf(name, sizeof name, "%swte.weight", pre);
    colo_st_entry(f, name, &dt, &nd, wte, &edata, &ebytes);
    if (colo_st_entry(f, "lm_head.weight", &hd, &nd, hs, &hdata, &hbytes) < 0 || strcmp(hd, dt) ||
        hbytes != ebytes || memcmp(hdata, edata, ebytes) != 0)
      return colo_fail(err, errlen, COLO_EINVAL,
                       "%s: lm_head.weight differs from wte.weight; colo's GPT-2 ties the two",
                       path);
  }
  return 0;
}

int colo_ckpt_load_weights(const char *path, colo_gpt_t *model, float *params, char *err,
                           size_t errlen) {
  host_sink_t h = {{params ? params : colo_gpt_params(model), NULL, NULL}};
  colo_ckpt_sink_t sink = {1, host_put, NULL, &h};
  return colo_ckpt_load_weights_to(path, model, &sink, err, errlen);
}

int colo_ckpt_load_weights_to(const char *path, colo_gpt_t *model, const colo_ckpt_sink_t *to,
                              char *err, size_t errlen) {
  colo_ckpt_sink_t sink = *to;
  sink.kinds = 1; /* the parameters alone */
  struct stat sb;
  if (stat(path, &sb) < 0)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(errno));
  if (S_ISDIR(sb.st_mode)) { /* a checkpoint: verified, its parameters only */
    colo_ckpt_meta_t meta;
    return colo_ckpt_load_to(path, &meta, model, &sink, err, errlen);
  }
  if (colo_gpt_config(model)->arch == COLO_ARCH_LLAMA) /* HuggingFace's Llama layout */
    return colo_hf_read_llama(path, model, &sink, err, errlen);
  source_t s;
  if (source_init(&s, 1, 1, colo_gpt_config(model)->n_layer, 1) < 0)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  source_file_t *x = &s.file[0];
  s.n = 1;
  snprintf(x->path, sizeof x->path, "%s", path);
  int rc = colo_st_open(path, &x->f, err, errlen);
  if (rc == 0) {
    x->open = 1;
    s.strip = !cJSON_GetObjectItemCaseSensitive(x->f.hdr, "transformer.wte.weight");
    s.any_float = 1;
    rc =
        gpt2_check_shape(&x->f, s.strip ? "" : "transformer.", colo_gpt_config(model), err, errlen);
  }
  if (rc == 0)
    rc = source_load(&s, model, &sink, err, errlen);
  source_close(&s);
  return rc;
}

/* The steps of the step_NNNNNNNN directories under root (at most cap), in directory order. */
static int list_steps(const char *root, unsigned long long *steps, size_t cap, size_t *n) {
  DIR *d = opendir(root);
  *n = 0;
  if (!d)
    return COLO_ENOENT;
  struct dirent *e;
  while ((e = readdir(d)) && *n < cap) {
    unsigned long long s;
    char tail;
    if (sscanf(e->d_name, "step_%llu%c", &s, &tail) == 1 && strlen(e->d_name) == 13)
      steps[(*n)++] = s;
  }
  closedir(d);
  return 0;
}

/* The checkpoint under root that verifies, tried in order: the newest first, or with `best` the
 * best its manifest records first (colo_ckpt_rank; the newest of equals; those without a loss or
 * score are not tried). */
int colo_ckpt_find_step(const char *root, uint64_t step, char *out, size_t out_len, char *err,
                        size_t errlen) {
  char dir[1200];
  colo_ckpt_step_dir(root, step, dir, sizeof dir);
  cJSON *files, *rootj;
  colo_ckpt_meta_t meta;
  int rc = parse_manifest(dir, &meta, &files, &rootj, err, errlen);
  if (rc == 0) {
    rc = verify(dir, files, err, errlen);
    cJSON_Delete(rootj);
  }
  if (rc == 0)
    snprintf(out, out_len, "%s", dir);
  return rc;
}

float colo_ckpt_rank(const colo_ckpt_meta_t *meta) {
  return meta->has_score ? -meta->score : meta->val_loss;
}

static int find_verified(const char *root, int best, char *out, size_t out_len, char *skipped,
                         size_t skipped_len) {
  static const unsigned long long TRIED = (unsigned long long)-1;
  unsigned long long steps[4096];
  float val[4096];
  size_t n;
  if (list_steps(root, steps, 4096, &n) < 0)
    return COLO_ENOENT;
  if (skipped && skipped_len)
    skipped[0] = '\0';
  for (size_t i = 0; best && i < n; i++) {
    char dir[1200], err[256];
    colo_ckpt_meta_t meta;
    colo_ckpt_step_dir(root, steps[i], dir, sizeof dir);
    val[i] = colo_ckpt_read_meta(dir, &meta, err, sizeof err) == 0 ? colo_ckpt_rank(&meta) : NAN;
    if (!isfinite(val[i]))
      steps[i] = TRIED;
  }
  for (;;) {
    size_t k = n;
    for (size_t i = 0; i < n; i++)
      if (steps[i] != TRIED &&
          (k == n || (best ? val[i] < val[k] || (val[i] == val[k] && steps[i] > steps[k])
                           : steps[i] > steps[k])))
        k = i;
    if (k == n)
      return COLO_ENOENT;
    char err[512];
    unsigned long long step = steps[k];
    steps[k] = TRIED;
    if (colo_ckpt_find_step(root, step, out, out_len, err, sizeof err) == 0)
      return 0;
    if (skipped && skipped_len) {
      size_t m = strlen(skipped);
      snprintf(skipped + m, skipped_len - m, "%s%s", m ? "; " : "", err);
    }
  }
}

static int cmp_desc(const void *a, const void *b) {
  unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
  return x > y ? -1 : x < y;
}

int colo_ckpt_newest(const char *root, size_t want, char (*dirs)[1200], uint64_t *steps,
                     size_t *n) {
  unsigned long long all[4096];
  size_t k;
  *n = 0;
  if (list_steps(root, all, 4096, &k) < 0)
    return COLO_ENOENT;
  qsort(all, k, sizeof all[0], cmp_desc);
  for (size_t i = 0; i < k && *n < want; i++) { /* newest first, then turned round */
    char err[512];
    if (colo_ckpt_find_step(root, all[i], dirs[*n], sizeof dirs[0], err, sizeof err) == 0)
      steps[(*n)++] = all[i];
  }
  for (size_t i = 0; i < *n / 2; i++) {
    char d[1200];
    uint64_t s = steps[i];
    memcpy(d, dirs[i], sizeof d);
    memcpy(dirs[i], dirs[*n - 1 - i], sizeof d);
    memcpy(dirs[*n - 1 - i], d, sizeof d);
    steps[i] = steps[*n - 1 - i];
    steps[*n - 1 - i] = s;
  }
  return 0;
}

int colo_ckpt_find_latest(const char *root, char *out, size_t out_len, char *skipped,
                          size_t skipped_len) {
  return find_verified(root, 0, out, out_len, skipped, skipped_len);
}

int colo_ckpt_find_best(const char *root, char *out, size_t out_len, char *skipped,
                        size_t skipped_len) {
  return find_verified(root, 1, out, out_len, skipped, skipped_len);
}

int colo_ckpt_prune(const char *root, int keep, int keep_best, int *removed) {
  *removed = 0;
  if (keep <= 0)
    return 0;
  unsigned long long steps[4096];
  size_t n;
  if (list_steps(root, steps, 4096, &n) < 0)
    return COLO_ENOENT;
  qsort(steps, n, sizeof steps[0], cmp_desc);
  /* each one's fate: 1 kept, 2 removed */
  unsigned char fate[4096];
  int complete = 0;
  size_t best = n;
  float best_rank = INFINITY;
  for (size_t i = 0; i < n; i++) {
    char dir[1200], err[256];
    colo_ckpt_step_dir(root, steps[i], dir, sizeof dir);
    colo_ckpt_meta_t meta;
    cJSON *files, *rootj;
    fate[i] = 2;
    if (parse_manifest(dir, &meta, &files, &rootj, err, sizeof err) != 0) {
      if (complete < keep) /* newer than the oldest kept: being written, or left to resume */
        fate[i] = 1;
      continue;
    }
    cJSON_Delete(rootj);
    if (meta.asked || complete < keep) /* asked for, or among the newest: kept */
      fate[i] = 1;
    complete += !meta.asked;
    /* the best; the newest of equals, which has trained the longest */
    float rank = colo_ckpt_rank(&meta);
    if (keep_best && !meta.asked && isfinite(rank) && rank < best_rank) {
      best_rank = rank;
      best = i;
    }
  }
  if (best < n)
    fate[best] = 1;
  for (size_t i = 0; i < n; i++) {
    if (fate[i] != 2)
      continue;
    char dir[1200];
    colo_ckpt_step_dir(root, steps[i], dir, sizeof dir);
    remove_dir(dir);
    struct stat sb;
    if (stat(dir, &sb) != 0)
      (*removed)++;
  }
  return 0;
}

int colo_ckpt_drop_after(const char *root, uint64_t step, char *removed, size_t removed_len) {
  unsigned long long steps[4096];
  size_t n;
  if (removed_len)
    removed[0] = '\0';
  if (list_steps(root, steps, 4096, &n) < 0)
    return 0;
  int count = 0;
  for (size_t i = 0; i < n; i++) {
    if (steps[i] <= step)
      continue;
    char dir[1200];
    colo_ckpt_step_dir(root, steps[i], dir, sizeof dir);
    remove_dir(dir);
    size_t k = strlen(removed);
    if (k + 20 < removed_len)
      snprintf(removed + k, removed_len - k, "%sstep_%08llu", k ? ", " : "", steps[i]);
    count++;
  }
  return count;
}

/* ---- LoRA runs: the adapters and their moments ---- */

int colo_ckpt_write_lora(const char *root, uint64_t step, const colo_lora_t *l, const float *p,
                         const float *m, const float *v, char *err, size_t errlen) {
  size_t nt;
  const colo_param_t *tab = colo_lora_table(l, &nt);
  colo_st_tensor_t *t = calloc(3 * nt, sizeof *t);
  char(*names)[112] = calloc(3 * nt, sizeof *names);
  if (!t || !names) {
    free(t);
    free(names);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  const float *src[3] = {p, m, v};
  for (int j = 0; j < 3; j++)
    for (size_t i = 0; i < nt; i++) {
      size_t k = (size_t)j * nt + i;
      snprintf(names[k], sizeof names[k], "%s%s", PREFIX[j], tab[i].name);
      t[k] = (colo_st_tensor_t){
          names[k], src[j] + tab[i].offset, 2, {tab[i].shape[0], tab[i].shape[1]}, tab[i].numel};
    }
  char dir[1200], path[1300];
  tmp_dir(root, step, dir, sizeof dir);
  snprintf(path, sizeof path, "%s/rank_00000.safetensors", dir);
  int rc = colo_safetensors_write(path, t, 3 * nt, err, errlen);
  free(t);
  free(names);
  return rc;
}

/* how a LoRA run keeps its frozen model, for a refusal */
static const char *quant_said(const colo_lora_config_t *c) {
  return !c->quant ? "as loaded" : c->double_quant ? "in NF4 with double quantization" : "in NF4";
}

int colo_ckpt_load_lora(const char *dir, colo_ckpt_meta_t *meta, const colo_lora_t *l, float *p,
                        float *m, float *v, int same_model, char *err, size_t errlen) {
  cJSON *files, *root;
  int rc = parse_manifest(dir, meta, &files, &root, err, errlen);
  if (rc < 0)
    return rc;
  const colo_lora_config_t *c = colo_lora_config(l);
  char a[96], b[96];
  if (meta->lora.rank == 0)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s holds a whole model, not LoRA adapters: train.init_from takes "
                   "it as the model to adapt",
                   dir);
  else if (meta->lora.rank != c->rank || meta->lora.alpha != c->alpha ||
           meta->lora.targets != c->targets || meta->lora.rslora != c->rslora ||
           meta->lora.dora != c->dora)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s holds LoRA adapters of rank %d, alpha %g%s%s on %s; this run's "
                   "are rank %d, alpha %g%s%s on %s",
                   dir, meta->lora.rank, (double)meta->lora.alpha,
                   meta->lora.rslora ? " (rsLoRA)" : "", meta->lora.dora ? " (DoRA)" : "",
                   colo_lora_targets_name(meta->lora.targets, a, sizeof a), c->rank,
                   (double)c->alpha, c->rslora ? " (rsLoRA)" : "", c->dora ? " (DoRA)" : "",
                   colo_lora_targets_name(c->targets, b, sizeof b));
  else if (same_model && (meta->lora.quant != c->quant ||
                          (c->quant && meta->lora.double_quant != c->double_quant)))
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s holds LoRA adapters trained on the model %s; this run keeps it "
                   "%s (train.lora_quant, train.lora_double_quant)",
                   dir, quant_said(&meta->lora), quant_said(c));
  if (rc == 0)
    rc = verify(dir, files, err, errlen);
  cJSON_Delete(root);
  colo_st_file_t f;
  char path[1300];
  snprintf(path, sizeof path, "%s/rank_00000.safetensors", dir);
  if (rc == 0)
    rc = colo_st_open(path, &f, err, errlen);
  if (rc < 0)
    return rc;
  size_t nt;
  const colo_param_t *tab = colo_lora_table(l, &nt);
  float *dst[3] = {p, m, v};
  for (int j = 0; j < 3 && rc == 0; j++)
    for (size_t i = 0; dst[j] && i < nt && rc == 0; i++) {
      char name[112];
      snprintf(name, sizeof name, "%s%s", PREFIX[j], tab[i].name);
      if (tab[i].numel == tab[i].full_numel) {
        rc = colo_st_get(&f, name, 2, tab[i].shape, dst[j] + tab[i].offset, 0, err, errlen);
        continue;
      }
      /* a tensor-parallel rank's part: the whole tensor, then the part */
      float *whole = malloc(tab[i].full_numel * sizeof *whole);
      rc = whole ? colo_st_get(&f, name, 2, tab[i].full_shape, whole, 0, err, errlen)
                 : colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      if (rc == 0)
        colo_lora_take_part(l, i, whole, dst[j] + tab[i].offset);
      free(whole);
    }
  colo_st_close(&f);
  return rc;
}

/* ---- DPO's reference ---- */

int colo_ckpt_write_dpo(const char *root, uint64_t step, const char *const *names,
                        const float *const *tables, const size_t *pairs, int n, char *err,
                        size_t errlen) {
  colo_st_tensor_t *t = calloc(n > 0 ? (size_t)n : 1, sizeof *t);
  if (!t)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    if (pairs[i] > (size_t)INT32_MAX) {
      free(t);
      return colo_fail(err, errlen, COLO_EINVAL, "DPO reference %s: %zu pairs", names[i], pairs[i]);
    }
    t[i] = (colo_st_tensor_t){names[i], tables[i], 2, {(int)pairs[i], 2}, 2 * pairs[i]};
  }
  char dir[1200], path[1300];
  tmp_dir(root, step, dir, sizeof dir);
  snprintf(path, sizeof path, "%s/" DPO_FILE, dir);
  int rc = colo_safetensors_write(path, t, (size_t)n, err, errlen);
  free(t);
  return rc;
}

int colo_ckpt_read_dpo(const char *dir, const char *name, float *dst, size_t pairs, char *err,
                       size_t errlen) {
  cJSON *files, *root, *it, *found = NULL;
  colo_ckpt_meta_t meta;
  int rc = parse_manifest(dir, &meta, &files, &root, err, errlen);
  if (rc < 0)
    return rc;
  cJSON_ArrayForEach(it, files) {
    cJSON *kind = cJSON_GetObjectItem(it, "kind");
    if (cJSON_IsString(kind) && !strcmp(kind->valuestring, DPO_KIND))
      found = it;
  }
  if (!found)
    rc = colo_fail(err, errlen, COLO_ENOENT,
                   "checkpoint %s holds no table of DPO's reference log-probabilities (its run "
                   "did not precompute them)",
                   dir);
  if (rc == 0)
    rc = check_entry(dir, found, err, errlen);
  if (rc == 0)
    rc = verify_file(dir, cJSON_GetObjectItem(found, "name")->valuestring,
                     cJSON_GetObjectItem(found, "bytes")->valuedouble,
                     cJSON_GetObjectItem(found, "sha256")->valuestring, err, errlen);
  char path[1400];
  if (rc == 0)
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItem(found, "name")->valuestring);
  cJSON_Delete(root);
  colo_st_file_t f;
  if (rc == 0)
    rc = colo_st_open(path, &f, err, errlen);
  if (rc < 0)
    return rc;
  const char *dtype, *data;
  int ndim;
  long shape[2];
  size_t bytes;
  if (colo_st_entry(&f, name, &dtype, &ndim, shape, &data, &bytes) < 0)
    rc = colo_fail(err, errlen, COLO_ENOENT,
                   "checkpoint %s: its DPO reference has no table of the set %s", dir, name);
  else if (ndim != 2 || shape[1] != 2 || (size_t)shape[0] != pairs)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s: its DPO reference of the set %s is of %ld pairs, this run's set "
                   "has %zu (the data changed since its run began)",
                   dir, name, ndim == 2 ? shape[0] : -1L, pairs);
  else
    rc = colo_st_get(&f, name, 2, (const int[]){(int)pairs, 2}, dst, 0, err, errlen);
  colo_st_close(&f);
  return rc;
}
