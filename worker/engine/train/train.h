/* The training loop and the other colo-train commands (eval, sample), as library calls. */
#ifndef COLO_TRAIN_H
#define COLO_TRAIN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "../model/gpt.h"
#include "../model/lora.h"
#include "../optim/adamw.h"
#include "choices.h"

/* How GPU ranks reach each other: NCCL when every rank has a GPU of its own (auto), NCCL or fail,
 * or through host memory (tcp, with shared memory on one host; device buffers staged). */
enum { COLO_COMM_AUTO, COLO_COMM_NCCL, COLO_COMM_HOST };

/* DPO's losses (train.dpo_loss); SimPO and ORPO have no reference */
enum { COLO_DPO_SIGMOID = 0, COLO_DPO_HINGE, COLO_DPO_IPO, COLO_DPO_SIMPO, COLO_DPO_ORPO };
/* the loss a train.dpo_loss value names (NULL or "": sigmoid); a validated spec's only */
int colo_dpo_loss_parse(const char *name);

typedef struct {
  colo_gpt_config_t model;
  colo_adamw_config_t optim;
  int batch_size, grad_accum, steps;
  int eval_interval, eval_batches;
  int ckpt_interval;
  int ckpt_keep;          /* newest complete checkpoints kept in ckpt_dir; 0: all */
  int early_stop;         /* evaluations without a new lowest validation loss that end the run; 0:
                           * never */
  float early_stop_delta; /* how far below the lowest a loss must fall to count as one */
  int ckpt_keep_best;     /* also keep the one with the lowest validation loss, evaluating at each
                           * checkpoint written on schedule (a validation set is needed) */
  /* what ranks evaluations for keep_best and early stopping (train.best_metric): best_set 0, the
   * validation loss (lower better); k + 1, choice set k's score best_kind (0 acc, 1 acc_norm,
   * 2 acc_token; higher better), and early_stop_delta is how far above the highest it must rise */
  int best_set, best_kind;
  /* optimizer.skip_spike_sigma and _window (spike.h): a step whose loss or gradient norm spikes
   * is not applied; sigma 0: never */
  float spike_sigma;
  int spike_window;
  int recompute;
  /* NEFTune (train.neftune_alpha): uniform noise in ±alpha/sqrt(block_size·n_embd) on the
   * embeddings in training (colo_gpt_set_noise; each row its own on whichever rank); 0: none */
  float neftune_alpha;
  /* the weights' exponential moving average (train.ema_decay; 0: none): kept in host memory,
   * updated after every step that changes them, written into the checkpoints as ema.<name>
   * (eval, sample and export take it with --ema) */
  float ema_decay;
  /* DPO (train.dpo_beta > 0; Rafailov et al. 2023, TRL's DPOTrainer with loss_type sigmoid): the
   * training data are preference pairs (data.h's colo_pairs_batch: a batch of batch_size rows is
   * batch_size/2 pairs), the loss −log σ(β·((π_c − ρ_c) − (π_r − ρ_r))) of each pair's summed
   * answer log-probabilities under the model (π) and the reference (ρ: the model as the run
   * starts: the frozen model without adapters, or with those of the LoRA checkpoint init_from
   * names; a whole model's run: its weights as loaded), its mean over the step's pairs;
   * validation likewise. dpo_precompute (always without lora.rank): the reference's
   * log-probabilities of every pair computed once before the first step and carried in the
   * checkpoints, instead of its forward at every step. */
  float dpo_beta;
  int dpo_precompute;
  /* the loss of z (TRL's loss_type): COLO_DPO_SIGMOID −log σ(z) (with dpo_label_smoothing ε,
   * cDPO's −(1 − ε)·log σ(z) − ε·log σ(−z)), _HINGE max(0, 1 − z), _IPO (h − 1/(2β))² of the
   * answers' mean log-probabilities per counted token; without a reference, on those means ℓ:
   * _SIMPO −log σ(β(ℓ_c − ℓ_r) − dpo_simpo_gamma) (smoothed likewise), _ORPO
   * −ℓ_c − β·log σ(log odds(ℓ_c) − log odds(ℓ_r)) */
  int dpo_loss;
  float dpo_label_smoothing;
  float dpo_simpo_gamma;
  float dpo_rpo_alpha; /* RPO: + alpha·(the chosen answer's NLL per counted token) a pair */
  uint64_t seed;
  const char *train_path, *val_path; /* resolved paths */
  /* a blend in place of train_path (n_sources > 0): the resolved paths and their weights */
  const char *const *source_paths;
  const double *source_weights;
  int n_sources;
  int data_order; /* COLO_ORDER_RANDOM or _SHUFFLE (data.h); 0: random */
  /* data.document_token: the token that begins each document, attention kept within them and
   * positions restarting at each (colo_gpt_set_documents); -1: none */
  int document_token;
  /* validation sets in place of val_path (n_val > 0): resolved paths, weights in the validation
   * loss (their weighted mean), and names for the reports */
  const char *const *val_paths;
  const double *val_weights;
  const char *const *val_names;
  int n_val;
  /* multiple-choice sets (data.choice_sets: choices.h), scored at each evaluation: resolved
   * paths and names for the reports */
  const char *const *choice_paths;
  const char *const *choice_names;
  int n_choice;
  unsigned choice_questions; /* > 0: each evaluation scores each set's first this many alone */
  const char *init_from;     /* weights to start from (colo_ckpt_load_weights), or NULL: random */
  /* LoRA adapters (lora.rank > 0): the model (init_from's, or the seed's) is frozen and only the
   * adapters train; their checkpoints hold the adapters alone, and name init_from */
  colo_lora_config_t lora;
  const char *ckpt_dir;  /* NULL: no checkpoints */
  const char *resume;    /* NULL, "auto" (newest valid in ckpt_dir) or a directory */
  int stop_at;           /* >0: save a checkpoint and stop after this many steps */
  size_t memory_limit;   /* bytes for the memory pool, 0: unlimited */
  int device;            /* 0: the CPU backend; 1: the CUDA backend on GPU `gpu` */
  int gpu;               /* which GPU */
  int comm;              /* a GPU run's collectives: COLO_COMM_AUTO, _NCCL or _HOST (above) */
  int math;              /* GPU products: COLO_MATH_FP32, _TF32, _BF16 or _FP16 (backend.h) */
  FILE *progress;        /* JSON lines, or NULL */
  int quiet;             /* no per-step line on stdout */
  const char *dump_path; /* reference dump for tests, or NULL */
  /* data parallelism: world > 1 joins a TCP communicator through the store rank 0 serves */
  int world, rank;
  const char *store_addr; /* "host:port" */
  const char *bind_host;  /* this rank's address for its peers */
  int comm_timeout_ms;
  int zero_stage;
  size_t chunk_floats; /* ZeRO's chunk capacity (memory.chunk_mib); 0: searched */
  int tp; /* tensor-parallel degree: world = dp × tp, tensor-parallel ranks adjacent */
  int sequence_parallel;
  int pp; /* pipeline stages: world = pp × dp × cp × tp */
  /* context parallelism: each sequence split over cp ranks (model/gpt.h); they hold the same
   * batch and parameters, and count as data-parallel ranks for gradients and ZeRO's pieces */
  int cp;
  int micro_batches;     /* per step, through the pipeline (1F1B) */
  float loss_scale_init; /* > 0: dynamic loss scaling from this scale; 0: none */
  int loss_scale_window; /* clean steps before the scale doubles */
  /* memory.placement=static (GPU, ZeRO stage 1 and up; parallel/zero.h): the fractions of this
   * rank's pieces kept on the device, the rest in host memory, and of optimizer pieces in a
   * file under nvme_dir. 0: everything on the device, the fractions unread. */
  int placement_static;
  /* memory.placement=auto: a warm-up step with everything off the device that may be, then the
   * pieces that fit in the room its peak left moved onto it (colo_zero_place_auto) */
  int placement_auto;
  /* memory.chunk_cache: under automatic placement at ZeRO stage 3, gathered chunks stay on the
   * device between uses while the room allows (colo_zero_cache) */
  int chunk_cache;
  float param_device_fraction, optim_device_fraction, optim_nvme_fraction;
  const char *nvme_dir;
  const int *plant_steps; /* tests: steps (1-based) whose gradients the last rank makes inf */
  int n_plant;
  int parent_pid; /* >0: stop when the parent is no longer this process (COLO_WORKER_PID) */
  /* A stop asked from outside: a signal handler sets *stop_requested. At the start of each step
   * the ranks agree on it (any rank's request stops them all, at the same step), save a
   * checkpoint there (with ckpt_dir, after at least one step) and return COLO_ESTOPPED. NULL:
   * never asked, and no collective for it. */
  const volatile sig_atomic_t *stop_requested;
  /* A checkpoint asked from outside (colod's CheckpointJob, through SIGUSR1): a signal handler
   * adds one to *save_requested. The ranks agree on it with the stop, in the same collective:
   * any rank's new request makes them all save a checkpoint at that step's start (with
   * ckpt_dir, after at least one step) and train on. Requests that arrive while it is written
   * are answered by it. NULL: never asked. */
  const volatile sig_atomic_t *save_requested;
} colo_train_config_t;

/* Trains as configured. Returns 0 or a negative colo code with the reason in err: COLO_ESTOPPED
 * when it stopped as asked (cfg->stop_requested), err saying where. The final
 * train loss and last validation loss are written to *final_loss / *final_val (may be NULL;
 * val is NaN when there was no evaluation). */
int colo_train_run(const colo_train_config_t *cfg, float *final_loss, float *final_val, char *err,
                   size_t errlen);

/* Mean loss of a checkpoint over n_batches fixed windows of a shard. */
/* Whether eval, sample, export and average read a checkpoint's moving average of its weights
 * (train.ema_decay's ema.<name>; colo-train's --ema) in place of the weights; a checkpoint
 * without one is then refused. For the process: colo-train runs one command. */
void colo_checkpoint_weights_ema(int on);

/* document_token: COLO_EVAL_AS_TRAINED (the checkpoint's own data.document_token, or none), -1
 * (whole windows), or a token that begins each document (one the shard must hold). */
#define COLO_EVAL_AS_TRAINED (-2)
int colo_eval_checkpoint(const char *ckpt, const char *data, int batches, int batch_size,
                         uint64_t seed, int gpu, int document_token, float *loss, char *err,
                         size_t errlen);

/* A checkpoint's scores on a multiple-choice set (choices.h) at path, in batches of batch_size
 * sequences, its first `limit` questions alone (0: all); document_token as colo_eval_checkpoint's.
 * samples (NULL: none) gets a JSON line a question: its number, label, the three picks (pred: by
 * log-probability, pred_norm: per character, pred_token: per token), and each ending's
 * log-probability, tokens and characters. */
int colo_eval_choices(const char *ckpt, const char *path, int batch_size, int gpu,
                      int document_token, size_t limit, colo_choices_score_t *score, FILE *samples,
                      char *err, size_t errlen);

/* The parameters of a checkpoint of any layout as one safetensors file of whole tensors in
 * HuggingFace's layout of its architecture (hf.h: GPT2LMHeadModel's names, what colo's
 * train.init_from reads too, or LlamaForCausalLM's); written to out.tmp, then renamed. With
 * config, a transformers config.json there as well. */
int colo_export_checkpoint(const char *ckpt, const char *out, const char *config, char *err,
                           size_t errlen);

/* The weighted mean of n checkpoints' parameters (w NULL: each weighs 1), each checkpoint of any
 * layout or a HuggingFace model's directory, all of one model (COLO_EINVAL naming the first that
 * is not), written as colo_export_checkpoint writes one: checkpoint averaging (fairseq's
 * average_checkpoints, LAWA), or a model soup of fine-tunings of one model. Sums in double, one
 * checkpoint in memory at a time; names each on stderr as it is read. */
int colo_average_checkpoints(const char *const *ckpts, const double *w, int n, const char *out,
                             const char *config, char *err, size_t errlen);

/* A LoRA run's checkpoint's adapters alone (COLO_EINVAL for a whole model's): COLO_ADAPTERS_PEFT
 * as HuggingFace PEFT's adapter_model.safetensors and adapter_config.json in directory out
 * (colo_hf_write_peft); COLO_ADAPTERS_GGUF as llama.cpp's LoRA adapter file out
 * (colo_gguf_write_lora), for the model's own GGUF export. */
enum { COLO_ADAPTERS_PEFT, COLO_ADAPTERS_GGUF };
int colo_export_adapters(const char *ckpt, const char *out, int format, char *err, size_t errlen);

/* The same as one GGUF file (gguf.h) for llama.cpp, its matrices of `type` (COLO_GGUF_*), with
 * the tokenizer at tokenizer (a tokenizer.json, or a folder colo_bpe_load reads); NULL for a
 * model of bytes (vocab_size 256: the bytes are its tokens; another must name its tokenizer). */
int colo_export_gguf(const char *ckpt, const char *out, const char *tokenizer, int type, char *err,
                     size_t errlen);

/* Generates n tokens from a checkpoint: the prompt's tokens in, the tokens' bytes out to `out`;
 * bytes as tokens (bpe NULL), or GPT-2's BPE (its vocabulary must fit the model's), where it
 * stops early at <|endoftext|>. Each token costs one position's work against a cache of the
 * keys and values before it (colo_gpt_decode) while the text fits block_size; past it, and with
 * full_forward, the whole window of the last block_size tokens runs again for each. */
struct colo_bpe;
typedef struct {
  int tokens;        /* how many to generate */
  float temperature; /* 0: the most likely token each time */
  int top_k;         /* draw from the k most likely (0: all) */
  float top_p;       /* and of those, the fewest whose probabilities add up to top_p (1: all) */
  uint64_t seed;
  const struct colo_bpe *bpe; /* NULL: bytes as tokens */
  int full_forward;
  int gpu; /* -1: the CPU; else this GPU, fp32 storage (the CUDA backend) */
  /* a chat template ("llama3", "chatml"; NULL: none): the prompt is a user's message, after a
   * system message where `system` is not NULL, and the text is the assistant's answer, ending
   * at the template's end of a message */
  const char *chat, *system;
} colo_sample_opts_t;
int colo_sample_checkpoint(const char *ckpt, const char *prompt, const colo_sample_opts_t *o,
                           FILE *out, char *err, size_t errlen);

/* A conversation with a checkpoint's model in o->chat's template (a tokenizer is needed): each
 * line of `in` is a user's message (after o->system's, if any; empty lines are skipped, and
 * "/reset" begins the conversation anew); the assistant's answer is printed to `out` as it is
 * sampled, then a newline, and joins the conversation. The decoding cache keeps the keys and values
 * of the conversation so far: a turn runs only its tokens past those the cache already holds. "> "
 * goes to `prompts` before each line when it is not NULL. 0 at the end of `in`, or the first error.
 */
int colo_chat_checkpoint(const char *ckpt, const colo_sample_opts_t *o, FILE *in, FILE *out,
                         FILE *prompts, char *err, size_t errlen);

#endif
