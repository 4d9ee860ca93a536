/* Job files and job validation: every bad spec gets its exact message; parse errors name the
 * file and line; YAML and JSON read the same; the shipped example is valid. */
#include "common/error.h"
#include "common/jobspec.h"
#include "common/pbcodec.h"
#include "test.h"

/* a valid base: every case below adds to it */
#define BASE "name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\n"

static Colo__V1__JobSpec *parse(const char *yaml, char *err, size_t errlen, int *rc) {
  Colo__V1__JobSpec *s = NULL;
  *rc = colo_pb_from_yaml(yaml, strlen(yaml), "job.yaml", &colo__v1__job_spec__descriptor,
                          (ProtobufCMessage **)&s, err, errlen);
  return s;
}

/* Parses, fills defaults, validates: the first error message, or "" when valid. */
static void check(const char *yaml, char *err, size_t errlen) {
  int rc;
  err[0] = '\0';
  Colo__V1__JobSpec *s = parse(yaml, err, errlen, &rc);
  if (rc < 0)
    return;
  ASSERT_EQ_INT(colo_jobspec_fill_defaults(s), 0);
  rc = colo_jobspec_validate(s, err, errlen);
  if (rc == 0)
    err[0] = '\0';
  else
    ASSERT_EQ_INT(rc, COLO_EINVAL);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

static const struct {
  const char *yaml;
  const char *msg;
} BAD[] = {
    {"data: {train_path: a}\n", "name must be set"},
    {"name: 'bad name!'\ndata: {train_path: a}\n",
     "name \"bad name!\" must be 1 to 64 characters of letters, digits, '-', '_' and '.'"},
    {BASE "model: {n_layer: 0}\n", "model.n_layer=0 must be between 1 and 1024"},
    {BASE "model: {n_head: 5, n_embd: 128}\n", "model.n_head=5 does not divide model.n_embd=128"},
    {BASE "model: {arch: mamba}\n", "job.yaml:3: model.arch: \"mamba\" must be one of gpt2, llama"},
    {BASE "model: {arch: llama, n_head: 4, n_embd: 12}\n",
     "model.arch=llama rotates pairs of each head's values: n_embd/n_head=3 must be even"},
    {BASE "model: {rope_theta: 0.5}\n", "model.rope_theta=0.5 must be between 1 and 1e9"},
    {BASE "model: {tie_embeddings: false}\n", "model.tie_embeddings=false needs model.arch=llama"},
    {BASE "model: {arch: llama, rope_scaling_factor: 8, rope_low_freq_factor: 4}\n",
     "model.rope_scaling_factor=8 needs model.arch=llama, a factor from 1 to 1024, 0 < "
     "rope_low_freq_factor (4) < rope_high_freq_factor (4) and rope_original_context (8192) at "
     "least 1"},
    {BASE "model: {arch: llama, hf_layout: phi4}\n",
     "model.hf_layout \"phi4\" must be phi3 (Phi-3's layout), with model.arch=llama and without "
     "qkv_bias, qk_norm or head_dim, which Phi-3 has not"},
    {BASE "model: {hf_layout: phi3}\n",
     "model.hf_layout \"phi3\" must be phi3 (Phi-3's layout), with model.arch=llama and without "
     "qkv_bias, qk_norm or head_dim, which Phi-3 has not"},
    /* LongRoPE: a divisor for each rotated pair of a head (128/4 = 32 wide: 16), both lists */
    {BASE "model: {arch: llama, rope_short_factor: [1, 2], rope_long_factor: [1, 2]}\n",
     "model.rope_short_factor and rope_long_factor (LongRoPE) need model.arch=llama, no "
     "rope_scaling_factor, and 16 values each, one for each rotated pair of a head of 32 (they "
     "have 2 and 2)"},
    {BASE "model: {rope_attention_factor: 1.2}\n",
     "model.rope_short_factor and rope_long_factor (LongRoPE) need model.arch=llama, no "
     "rope_scaling_factor, and 16 values each, one for each rotated pair of a head of 32 (they "
     "have 0 and 0)"},
    {BASE "model: {arch: llama, rope_short_factor: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
          "1], rope_long_factor: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -2]}\n",
     "model.rope_short_factor[15]=1 and rope_long_factor[15]=-2 must be above 0 and at most 1e6"},
    {BASE "model: {arch: llama, n_kv_head: 3}\n",
     "model.n_kv_head=3 must divide model.n_head=4, with model.arch=llama (grouped-query "
     "attention)"},
    {BASE "model: {n_kv_head: 2}\n",
     "model.n_kv_head=2 must divide model.n_head=4, with model.arch=llama (grouped-query "
     "attention)"},
    {BASE "model: {arch: llama, n_kv_head: 2}\nparallel: {tp: 4}\n",
     "parallel.tp=4 does not divide model.n_kv_head=2: each rank keeps whole key and value heads"},
    {BASE "model: {mlp_hidden: 100}\nparallel: {tp: 8}\n",
     "parallel.tp=8 does not divide model.n_head=4"},
    {BASE "model: {mlp_hidden: 102}\nparallel: {tp: 4}\n",
     "parallel.tp=4 does not divide the MLP's width 102 (model.mlp_hidden)"},
    {BASE "model: {vocab_size: 2000000}\n",
     "model.vocab_size=2000000 exceeds 1048576 (uint16 token shards address 65,536 tokens, uint32 "
     "ones more)"},
    {"name: t\n", "data.train_path must be set (or data.sources, a blend)"},
    {BASE "train: {eval_batches: 0}\nparallel: {pp: 2}\nmodel: {n_layer: 4}\n",
     "train.eval_batches=0 (every window of the validation set) needs parallel.pp=1: a pipeline "
     "evaluates whole batches"},
    {BASE "optimizer: {decay_steps: 50}\n",
     "optimizer.decay_steps=50 needs optimizer.schedule=wsd (the others decay from the warm-up's "
     "end)"},
    {BASE "optimizer: {schedule: wsd, warmup_steps: 900}\ntrain: {steps: 1000}\n",
     "optimizer.warmup_steps=900 and the decay's 200 steps exceed train.steps=1000"},
    {BASE "optimizer: {schedule: wsd, decay_steps: 1001}\ntrain: {steps: 1000}\n",
     "optimizer.warmup_steps=0 and the decay's 1001 steps exceed train.steps=1000"},
    {"name: t\ndata: {train_path: a, sources: [{path: b}]}\n",
     "data.train_path and data.sources do not go together: a blend names every training set in "
     "data.sources"},
    {"name: t\ndata: {sources: [{path: a}, {weight: 2}]}\n", "data.sources[1].path must be set"},
    {"name: t\ndata: {sources: [{path: a/../../b}]}\n",
     "data.sources[0].path \"a/../../b\" must be a path relative to the data root, without "
     "\"..\""},
    {"name: t\ndata: {sources: [{path: a, weight: -1}]}\n",
     "data.sources[0].weight=-1 must be a positive number"},
    {"name: t\ndata: {sources: [{path: a, weight: 5000}, {path: b}]}\n",
     "data.sources[1].weight=1 is less than 1/4096 of the weights' sum (5001)"},
    {"name: t\ndata: {train_path: /etc/passwd}\n",
     "data.train_path \"/etc/passwd\" must be a path relative to the data root, without \"..\""},
    {"name: t\ndata: {train_path: a, val_path: ../../secret}\n",
     "data.val_path \"../../secret\" must be a path relative to the data root, without \"..\""},
    {BASE "train: {init_from: /models/gpt2.safetensors}\n",
     "train.init_from \"/models/gpt2.safetensors\" must be a path relative to the data root, "
     "without \"..\""},
    {BASE "parallel: {tp: 3}\nmodel: {n_head: 8, n_embd: 128}\n",
     "parallel.tp=3 does not divide model.n_head=8"},
    {BASE "parallel: {pp: 8}\nmodel: {n_layer: 4}\n",
     "parallel.pp=8 exceeds model.n_layer=4: every stage needs a layer"},
    {BASE "parallel: {zero_stage: 4}\n", "parallel.zero_stage=4 must be 0, 1, 2 or 3"},
    {BASE "parallel: {zero_stage: 3, pp: 2}\n",
     "parallel.zero_stage=3 cannot be combined with parallel.pp=2: use stage 0 or 1"},
    {BASE "parallel: {sequence_parallel: true}\n",
     "parallel.sequence_parallel needs parallel.tp > 1 (it is 1)"},
    {BASE "parallel: {sequence_parallel: true, tp: 2}\nmodel: {block_size: 63}\n",
     "parallel.tp=2 does not divide model.block_size=63, as sequence parallelism needs"},
    {BASE "parallel: {dp: 0}\n", "parallel.dp=0 must be at least 1"},
    {BASE "parallel: {dp: 300, tp: 4, pp: 64}\nmodel: {n_layer: 64}\n",
     "parallel.dp×cp×tp×pp=76800 exceeds the limit of 65536 ranks"},
    {BASE "parallel: {cp: 0}\n", "parallel.cp=0 must be at least 1"},
    {BASE "parallel: {cp: 8}\n",
     "parallel.cp=8 does not divide the heads of each tensor-parallel rank (model.n_head/tp = 4): "
     "attention splits them over the sequence's pieces"},
    {BASE "parallel: {cp: 2, tp: 4}\n",
     "parallel.cp=2 does not divide the heads of each tensor-parallel rank (model.n_head/tp = 1): "
     "attention splits them over the sequence's pieces"},
    {BASE "parallel: {cp: 2}\nmodel: {block_size: 63}\n",
     "parallel.cp=2 does not divide model.block_size=63: each rank holds an equal piece of every "
     "sequence"},
    {BASE "parallel: {cp: 2, tp: 2, sequence_parallel: true}\nmodel: {block_size: 66}\n",
     "parallel.tp=2 does not divide model.block_size=66/cp, as sequence parallelism needs"},
    {BASE "parallel: {micro_batches: 5}\ntrain: {batch_size: 12}\n",
     "parallel.micro_batches=5 does not divide train.batch_size=12"},
    {BASE "optimizer: {lr: 0}\n", "optimizer.lr=0 must be positive"},
    {BASE "optimizer: {beta1: 1}\n", "optimizer.beta1=1 must be in [0, 1)"},
    {BASE "optimizer: {lr: 0.01, min_lr: 0.1}\n",
     "optimizer.min_lr=0.1 must be between 0 and optimizer.lr=0.01"},
    {BASE "optimizer: {warmup_steps: 500}\ntrain: {steps: 100}\n",
     "optimizer.warmup_steps=500 exceeds train.steps=100"},
    {BASE "optimizer: {grad_clip: -1}\n",
     "optimizer.grad_clip=-1 must not be negative (0 disables clipping)"},
    {BASE "train: {tf32: true}\n",
     "train.tf32 needs resources.device=gpu: TF32 is a GPU's tensor-core mode"},
    {BASE "train: {tf32: true, precision: bf16}\nresources: {device: gpu}\n",
     "train.tf32 applies to train.precision=fp32 only, not bf16"},
    {BASE "train: {steps: 0}\n", "train.steps=0 evaluates a model without training it: it needs a "
                                 "model: train.init_from or train.init_from_job"},
    {"name: t\ndata: {train_path: a}\n",
     "train.eval_interval=100 needs data.val_path or data.val_sources (0 disables evaluation)"},
    {"name: t\ndata: {train_path: a}\ntrain: {eval_interval: 0}\ncheckpoint: {keep_best: true}\n",
     "checkpoint.keep_best needs data.val_path or data.val_sources: the best checkpoint is the "
     "one with the lowest validation loss (or train.best_metric: a data.choice_sets score)"},
    {BASE "train: {eval_interval: 0, early_stop_patience: 2}\ncheckpoint: {keep_best: true}\n",
     "train.early_stop_patience=2 needs evaluations: train.eval_interval > 0, or "
     "checkpoint.keep_best with a checkpoint.interval"},
    {BASE "train: {early_stop_patience: 2, early_stop_min_delta: -0.5}\n",
     "train.early_stop_min_delta=-0.5 must be a number, at least 0"},
    {BASE "train: {lora_rank: 9999}\n", "train.lora_rank=9999 is above model.n_embd=128"},
    {BASE "train: {lora_rank: 8, lora_alpha: 0}\n", "train.lora_alpha=0 must be a number above 0"},
    {BASE "train: {lora_rank: 8, lora_targets: 'attn.c_attn,q_proj'}\n",
     "train.lora_targets: lora target 'q_proj' is not one of attn.c_attn, attn.c_proj, mlp.c_fc, "
     "mlp.c_proj, all"},
    {BASE "train: {lora_rank: 8, lora_quant: nf4}\nparallel: {tp: 4}\n",
     "train.lora_quant=nf4 with parallel.tp=4 needs model.n_embd/tp (32) and the MLP's width/tp "
     "(128) to be multiples of 64: each rank's part of a matrix must hold whole NF4 blocks, as the "
     "model whole does"},
    {BASE "train: {lora_rank: 8}\nparallel: {zero_stage: 2}\n",
     "train.lora_rank=8 with parallel.zero_stage=2: stages 1 and 2 shard gradients and optimizer "
     "state, and the frozen model has none; zero_stage=3 shards its parameters, 0 keeps it whole"},
    {BASE "train: {lora_plus_ratio: 16}\n",
     "train.lora_plus_ratio=16 sets the adapters' B learning rate: it needs train.lora_rank > 0"},
    {BASE "train: {lora_rank: 8, lora_plus_ratio: 2000}\n",
     "train.lora_plus_ratio=2000 must be between 0 and 1024"},
    {BASE "train: {lora_rank: 8, lora_dropout: 1}\n",
     "train.lora_dropout=1 must be at least 0 and below 1"},
    {BASE "train: {lora_rslora: true}\n",
     "train.lora_rslora scales LoRA adapters' updates: it needs train.lora_rank > 0"},
    {BASE "train: {lora_dora: true}\n",
     "train.lora_dora rescales LoRA adapters' products: it needs train.lora_rank > 0"},
    {BASE "train: {lora_rank: 8, lora_dora: true}\ncheckpoint: {export_format: gguf-lora}\n",
     "checkpoint.export_format=gguf-lora with train.lora_dora: llama.cpp's LoRA adapters have no "
     "DoRA magnitudes; export gguf or hf (the adapters merged in) or peft"},
    {BASE "train: {lora_dropout: 0.1}\n",
     "train.lora_dropout=0.1 drops the adapters' inputs: it needs train.lora_rank > 0"},
    {BASE "train: {lora_rank: 8, lora_quant: int4}\n",
     "train.lora_quant \"int4\" must be nf4 or none"},
    {BASE "train: {lora_quant: nf4}\n",
     "train.lora_quant=nf4 quantizes the frozen model of a LoRA run: it needs train.lora_rank > 0"},
    {BASE "train: {neftune_alpha: -1}\n", "train.neftune_alpha=-1 must be between 0 and 1000"},
    {BASE "train: {neftune_alpha: 5000}\n", "train.neftune_alpha=5000 must be between 0 and 1000"},
    {BASE "train: {ema_decay: 1}\n", "train.ema_decay=1 must be in [0, 1) (0: none)"},
    {BASE "train: {ema_decay: 0.9}\ncheckpoint: {export_ema: true}\n",
     "checkpoint.export_ema exports the weights' moving average: it needs train.ema_decay > 0 "
     "and checkpoint.export_format gguf or hf"},
    {BASE "checkpoint: {export_format: hf, export_ema: true}\n",
     "checkpoint.export_ema exports the weights' moving average: it needs train.ema_decay > 0 "
     "and checkpoint.export_format gguf or hf"},
    {BASE "train: {ema_decay: -0.5}\n", "train.ema_decay=-0.5 must be in [0, 1) (0: none)"},
    {BASE "train: {ema_decay: 0.999, lora_rank: 8}\n",
     "train.ema_decay averages a whole model's weights, and train.lora_rank=8 trains adapters "
     "alone"},
    {BASE "train: {lora_rank: 8, dpo_beta: 200}\n", "train.dpo_beta=200 must be between 0 and 100"},
    {BASE "train: {lora_rank: 8, dpo_precompute: true}\n",
     "train.dpo_precompute computes DPO's reference once: it needs train.dpo_beta > 0"},
    {BASE "train: {dpo_beta: 0.1, dpo_loss: kto}\n",
     "train.dpo_loss \"kto\" must be sigmoid, hinge, ipo, simpo or orpo"},
    {BASE "train: {dpo_loss: ipo}\n",
     "train.dpo_loss=ipo is DPO's loss: it needs train.dpo_beta > 0"},
    {BASE "train: {dpo_beta: 0.1, dpo_label_smoothing: 0.5}\n",
     "train.dpo_label_smoothing=0.5 must be at least 0 and below 0.5"},
    {BASE "train: {dpo_beta: 0.1, dpo_loss: hinge, dpo_label_smoothing: 0.1}\n",
     "train.dpo_label_smoothing=0.1 smooths the sigmoid loss: it needs train.dpo_beta > 0 and "
     "train.dpo_loss sigmoid or simpo"},
    {BASE "train: {dpo_beta: 2, dpo_loss: orpo, dpo_simpo_gamma: 1}\n",
     "train.dpo_simpo_gamma=1 is SimPO's margin: it needs train.dpo_loss simpo"},
    {BASE "train: {dpo_beta: 2, dpo_loss: simpo, dpo_simpo_gamma: 101}\n",
     "train.dpo_simpo_gamma=101 must be between 0 and 100"},
    {BASE "train: {dpo_beta: 0.1, dpo_loss: orpo, dpo_rpo_alpha: 1}\n",
     "train.dpo_rpo_alpha=1 adds the chosen answer's NLL to DPO's loss: it needs train.dpo_beta > "
     "0, and train.dpo_loss orpo has its own"},
    {BASE "train: {dpo_beta: 0.1, dpo_rpo_alpha: 101}\n",
     "train.dpo_rpo_alpha=101 must be between 0 and 100"},
    {BASE "train: {dpo_beta: 2, dpo_loss: simpo, dpo_precompute: true}\n",
     "train.dpo_precompute computes DPO's reference, and train.dpo_loss=simpo has none"},
    {BASE "train: {lora_rank: 8, dpo_beta: 0.1, batch_size: 7}\n",
     "train.dpo_beta=0.1 needs an even train.batch_size (7): a pair is two rows, its chosen and "
     "its "
     "rejected answer"},
    {BASE "train: {lora_rank: 8, dpo_beta: 0.1, batch_size: 12}\nparallel: {pp: 2, "
          "micro_batches: 4}\n",
     "train.dpo_beta=0.1 with parallel.micro_batches=4: each micro-batch of 3 rows must hold "
     "whole pairs (an even number of rows)"},
    {BASE "train: {lora_rank: 8, lora_double_quant: true}\n",
     "train.lora_double_quant quantizes NF4's scales: it needs train.lora_quant=nf4"},
    {BASE "train: {lora_rank: 8, lora_quant: none, lora_double_quant: true}\n",
     "train.lora_double_quant quantizes NF4's scales: it needs train.lora_quant=nf4"},
    {BASE "train: {lora_rank: 8}\nparallel: {zero_stage: 3}\nresources: {device: gpu}\n"
          "memory: {placement: static, param_device_fraction: 0, optim_device_fraction: 0.5}\n",
     "train.lora_rank=8: memory.optim_device_fraction and optim_nvme_fraction place the model's "
     "optimizer state, and the frozen model has none (the adapters' stays on the device); "
     "memory.param_device_fraction places its ZeRO-3 pieces"},
    {BASE "checkpoint: {export_format: peft}\n",
     "checkpoint.export_format=peft writes LoRA adapters: it needs train.lora_rank > 0"},
    {BASE "checkpoint: {export_format: gguf-lora}\n",
     "checkpoint.export_format=gguf-lora writes LoRA adapters: it needs train.lora_rank > 0"},
    {BASE "checkpoint: {export_format: onnx}\n",
     "checkpoint.export_format \"onnx\" must be gguf, hf, peft or gguf-lora"},
    {BASE "train: {init_pick: best}\n",
     "train.init_pick=best needs train.init_from_job: it picks among that job's checkpoints"},
    {BASE "train: {eval_interval: 0, eval_batches: 0}\nparallel: {pp: 2}\n"
          "checkpoint: {keep_best: true}\n",
     "train.eval_batches=0 (every window of the validation set) needs parallel.pp=1: a pipeline "
     "evaluates whole batches"},
    {"name: t\ndata: {train_path: a, val_path: v, val_sources: [{path: w}]}\n",
     "data.val_path and data.val_sources do not go together: name every validation set in "
     "data.val_sources"},
    {"name: t\ndata: {train_path: a, val_sources: [{path: v, name: web}, {path: w, name: web}]}\n",
     "data.val_sources[0] and [1] are both named \"web\""},
    {"name: t\ndata: {train_path: a, val_sources: [{path: v, name: 'a b'}]}\n",
     "data.val_sources[0].name \"a b\" must be 1 to 64 characters of letters, digits, '-', '_' "
     "and '.'"},
    {BASE "model: {qkv_bias: true}\n",
     "model.qkv_bias needs model.arch=llama (gpt2 has biases everywhere)"},
    {BASE "model: {qk_norm: true}\n", "model.qk_norm needs model.arch=llama (Qwen3's block)"},
    {BASE "model: {head_dim: 32}\n",
     "model.head_dim needs model.arch=llama (gpt2's heads are n_embd/n_head)"},
    {BASE "model: {arch: llama, head_dim: 33}\n",
     "model.arch=llama rotates pairs of each head's values: head_dim=33 must be even"},
    {BASE "model: {arch: llama, head_dim: 5000}\n", "model.head_dim=5000 must be at most 4096"},
    {BASE "model: {sliding_window: 4096}\n",
     "model.sliding_window needs model.arch=llama (Mistral's block; gpt2 attends every earlier "
     "token)"},
    {BASE "model: {arch: llama, sliding_window: 20000000}\n",
     "model.sliding_window=20000000 must be at most 16777216 tokens"},
    {BASE "model: {arch: llama, n_embd: 130, n_head: 4}\n",
     "model.n_head=4 does not divide model.n_embd=130"},
    {BASE "model: {arch: llama, qk_norm: true, qkv_bias: true}\n",
     "model.qk_norm and model.qkv_bias together are no published block (Qwen2's has the biases, "
     "Qwen3's the norms) and have no HuggingFace layout to export to"},
    {BASE "model: {arch: llama, rms_norm_eps: 0.5}\n",
     "model.rms_norm_eps=0.5 must be above 0 and at most 0.01"},
    {BASE "model: {rms_norm_eps: 1e-6}\n",
     "model.rms_norm_eps=1e-06 needs model.arch=llama (gpt2's LayerNorm has eps 1e-5)"},
    {"name: t\ndata: {train_path: a, val_path: v, document_token: 256}\n",
     "data.document_token=256 must be -1 (none) or a token below model.vocab_size=256"},
    {"name: t\ndata: {train_path: a, val_path: v, document_token: -2}\n",
     "data.document_token=-2 must be -1 (none) or a token below model.vocab_size=256"},
    {"name: t\ndata: {train_path: a, val_sources: [{path: /v}]}\n",
     "data.val_sources[0].path \"/v\" must be a path relative to the data root, without \"..\""},
    {BASE "memory: {placement: static}\n",
     "memory.placement=static or auto needs resources.device=gpu"},
    {BASE "memory: {param_device_fraction: 0.5}\nresources: {device: gpu}\n",
     "memory fractions need memory.placement=static"},
    {BASE "memory: {placement: static, param_device_fraction: 1.5}\nresources: {device: gpu}\n",
     "memory.param_device_fraction=1.5 must be between 0 and 1"},
    {BASE "memory: {placement: static, optim_device_fraction: 0.5, optim_nvme_fraction: 0.5}\n"
          "resources: {device: gpu}\n",
     "memory.optim_nvme_fraction=0.5 needs memory.nvme_dir"},
    {BASE "memory: {placement: static, optim_device_fraction: 0.8, optim_nvme_fraction: 0.5, "
          "nvme_dir: nv}\nresources: {device: gpu}\n",
     "memory.optim_device_fraction=0.8 plus memory.optim_nvme_fraction=0.5 exceeds 1"},
    {BASE "memory: {placement: auto}\nresources: {device: gpu}\n",
     "memory.placement=auto needs parallel.zero_stage of 1 or more: pieces leave the device as "
     "ZeRO pieces"},
    {BASE "memory: {placement: static, param_device_fraction: 0.5}\nresources: {device: gpu}\n"
          "parallel: {zero_stage: 1}\n",
     "memory.param_device_fraction=0.5 needs parallel.zero_stage=3 (it is 1): parameters leave "
     "the device as ZeRO-3 pieces"},
    {BASE "memory: {placement: static, optim_nvme_fraction: 0.25, optim_device_fraction: 0.5, "
          "nvme_dir: nv}\nresources: {device: gpu}\n",
     "memory.optim_device_fraction=0.5 and memory.optim_nvme_fraction=0.25 need "
     "parallel.zero_stage of 1 or more: optimizer state leaves the device as ZeRO pieces"},
    {BASE "checkpoint: {interval: 500}\ntrain: {steps: 100}\n",
     "checkpoint.interval=500 exceeds train.steps=100"},
    {BASE "checkpoint: {dir: a/../../etc}\n",
     "checkpoint.dir \"a/../../etc\" must be a path relative to the checkpoint root, without "
     "\"..\""},
    {BASE "parallel: {tp: 16}\nmodel: {n_head: 16}\nresources: {devices_per_node: 8}\n",
     "parallel.tp=16 exceeds resources.devices_per_node=8: a tensor-parallel group must fit in "
     "one node"},
    {BASE "parallel: {tp: 4}\nresources: {devices_per_node: 6}\n",
     "parallel.tp=4 does not divide resources.devices_per_node=6: tensor-parallel groups would "
     "straddle nodes"},
    {BASE "max_restarts: 1000\n", "max_restarts=1000 exceeds 100"},
    {BASE "resources: {host_memory_mib: 2000000000}\n",
     "resources.host_memory_mib=2000000000 exceeds 1073741824 (1 PiB)"},
    {BASE "resources: {time_limit_s: 31536001}\n",
     "resources.time_limit_s=31536001 exceeds 31536000 (a year)"},
    {BASE "resources: {comm: nccl}\n",
     "resources.comm=nccl needs resources.device=gpu: NCCL moves GPU memory"},
    {BASE "after: [3, 0]\n", "after[1]=0 is not a job id"},
    {BASE "after: [3, 4, 3]\n", "after lists job 3 twice"},
    {BASE "after: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, "
          "23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, "
          "45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65]\n",
     "after lists 65 jobs; at most 64"},
    {BASE "resources: {host_labels: [ib, 'a b']}\n",
     "resources.host_labels: label \"a b\" must be 1 to 31 letters, digits, '.', '_' or '-'"},
    {BASE "resources: {host_labels: [ib, a100, ib]}\n", "resources.host_labels names ib twice"},
    {BASE "resources: {host_labels: [a0123456789012345678901234567890]}\n",
     "resources.host_labels: label \"a0123456789012345678901234567890\" must be 1 to 31 letters, "
     "digits, '.', '_' or '-'"},
    {BASE "resources: {host_labels: [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q]}\n",
     "resources.host_labels has 17 labels; at most 16"},
    {BASE "notify: {on: [ended]}\n", "notify.on needs notify.url: where to tell"},
    {BASE "notify: {url: 'ftp://hooks.example/x'}\n",
     "notify.url \"ftp://hooks.example/x\" must start with http:// or https://"},
    {BASE "notify: {url: 'https:///x'}\n", "notify.url \"https:///x\" names no host"},
    {BASE "notify: {url: 'https://hooks.example/a b'}\n",
     "notify.url \"https://hooks.example/a b\" has a space or a character outside printable "
     "ASCII"},
    {BASE "notify: {url: 'https://hooks.example/', on: [ended, started, ended]}\n",
     "notify.on names ended twice"},
};

TEST(bad_specs_have_exact_messages) {
  char err[512];
  size_t n = sizeof BAD / sizeof BAD[0];
  ASSERT(n >= 15);
  for (size_t i = 0; i < n; i++) {
    check(BAD[i].yaml, err, sizeof err);
    if (strcmp(err, BAD[i].msg) != 0)
      FAIL_AT("case %zu:\n%s\n    got:      \"%s\"\n    expected: \"%s\"", i, BAD[i].yaml, err,
              BAD[i].msg);
  }
  printf("  %zu bad specs, each with its exact message\n", n);
}

static const struct {
  const char *yaml;
  const char *msg;
} PARSE_ERRORS[] = {
    {BASE "parallel: {tpp: 2}\n", "job.yaml:3: unknown field \"parallel.tpp\""},
    {BASE "train:\n  precision: fp8\n",
     "job.yaml:4: train.precision: \"fp8\" must be one of fp32, bf16, fp16"},
    {BASE "train: {precision: unspecified}\n",
     "job.yaml:3: train.precision: \"unspecified\" must be one of fp32, bf16, fp16"},
    {BASE "parallel: {tp: two}\n", "job.yaml:3: parallel.tp: \"two\" is not an integer"},
    {"name: t\ndata: {train_path: a, order: sorted}\n",
     "job.yaml:2: data.order: \"sorted\" must be one of random, shuffle"},
    {BASE "train: {steps: -5}\n", "job.yaml:3: train.steps: -5 must not be negative"},
    {BASE "train: {steps: 99999999999}\n", "job.yaml:3: train.steps: 99999999999 is out of range"},
    {BASE "optimizer: {lr: nan}\n", "job.yaml:3: optimizer.lr: \"nan\" is not a finite number"},
    {BASE "parallel: {sequence_parallel: maybe}\n",
     "job.yaml:3: parallel.sequence_parallel: \"maybe\" is not true or false"},
    {BASE "model: 5\n", "job.yaml:3: model: expected a mapping"},
    {BASE "after: {job: 5}\n", "job.yaml:3: after: expected a list"},
    {BASE "name: again\n", "job.yaml:3: field \"name\" given twice"},
    {BASE "notify: {url: 'https://h.example/', on: [begun]}\n",
     "job.yaml:3: notify.on[0]: \"begun\" must be one of started, restarting, ended, failed"},
    {"- a\n- b\n", "job.yaml:1: document: expected a mapping"},
    {"name: [unclosed\n", "job.yaml:2: did not find expected ',' or ']'"},
    {"", "job.yaml:0: the document is empty"},
};

TEST(parse_errors_name_file_and_line) {
  char err[512];
  for (size_t i = 0; i < sizeof PARSE_ERRORS / sizeof PARSE_ERRORS[0]; i++) {
    int rc;
    Colo__V1__JobSpec *s = parse(PARSE_ERRORS[i].yaml, err, sizeof err, &rc);
    if (rc >= 0) {
      colo__v1__job_spec__free_unpacked(s, NULL);
      FAIL_AT("case %zu parsed but should not:\n%s", i, PARSE_ERRORS[i].yaml);
    }
    if (strcmp(err, PARSE_ERRORS[i].msg) != 0)
      FAIL_AT("case %zu:\n    got:      \"%s\"\n    expected: \"%s\"", i, err, PARSE_ERRORS[i].msg);
  }
}

TEST(yaml_and_json_read_the_same) {
  const char *yaml = "name: same\n"
                     "data:\n  train_path: x/train.bin\n  val_path: x/val.bin\n"
                     "parallel:\n  dp: 2\n  tp: 2\n  zero_stage: 1\n"
                     "optimizer: {lr: 3.0e-4, schedule: linear}\n"
                     "train: {steps: 50, precision: FP32, seed: 7}\n";
  const char *json = "{\"name\": \"same\", \"data\": {\"train_path\": \"x/train.bin\", "
                     "\"val_path\": \"x/val.bin\"}, \"parallel\": {\"dp\": 2, \"tp\": 2, "
                     "\"zero_stage\": 1}, \"optimizer\": {\"lr\": 0.0003, \"schedule\": "
                     "\"SCHEDULE_LINEAR\"}, \"train\": {\"steps\": 50, \"precision\": \"fp32\", "
                     "\"seed\": 7}}";
  char err[256];
  int rc;
  Colo__V1__JobSpec *a = parse(yaml, err, sizeof err, &rc);
  ASSERT_EQ_INT(rc, 0);
  Colo__V1__JobSpec *b = parse(json, err, sizeof err, &rc);
  if (rc != 0)
    FAIL_AT("json: %s", err);
  size_t la = colo__v1__job_spec__get_packed_size(a), lb = colo__v1__job_spec__get_packed_size(b);
  ASSERT_EQ_INT(la, lb);
  uint8_t *pa = malloc(la), *pb = malloc(lb);
  colo__v1__job_spec__pack(a, pa);
  colo__v1__job_spec__pack(b, pb);
  ASSERT(memcmp(pa, pb, la) == 0);
  ASSERT_EQ_INT(a->parallel->dp, 2);
  ASSERT_EQ_INT(a->optimizer->schedule, COLO__V1__SCHEDULE__SCHEDULE_LINEAR);
  ASSERT(a->optimizer->lr == 3.0e-4f);
  free(pa);
  free(pb);
  colo__v1__job_spec__free_unpacked(a, NULL);
  colo__v1__job_spec__free_unpacked(b, NULL);
}

/* a scalar where a list goes is a list of one, so `--set resources.host_labels=ib` adds one */
TEST(a_scalar_is_a_list_of_one) {
  char err[256];
  int rc;
  Colo__V1__JobSpec *s =
      parse(BASE "after: 7\nresources: {host_labels: ib}\n", err, sizeof err, &rc);
  if (rc != 0)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(s->n_after, 1);
  ASSERT_EQ_INT(s->after[0], 7);
  ASSERT_EQ_INT(s->resources->n_host_labels, 1);
  ASSERT_EQ_STR(s->resources->host_labels[0], "ib");
  ASSERT_EQ_INT(colo_pb_set((ProtobufCMessage **)&s, &colo__v1__job_spec__descriptor,
                            "resources.host_labels=a100", err, sizeof err),
                0);
  ASSERT_EQ_INT(s->resources->n_host_labels, 2); /* appended */
  ASSERT_EQ_STR(s->resources->host_labels[1], "a100");
  /* a field of messages takes YAML: a blend in place of the file's train_path */
  ASSERT_EQ_INT(colo_pb_set((ProtobufCMessage **)&s, &colo__v1__job_spec__descriptor,
                            "data.sources=[{path: a.bin, weight: 3}, {path: 'b/*.bin'}]", err,
                            sizeof err),
                0);
  ASSERT_EQ_INT(colo_pb_set((ProtobufCMessage **)&s, &colo__v1__job_spec__descriptor,
                            "data.train_path=", err, sizeof err),
                0);
  ASSERT_EQ_INT(s->data->n_sources, 2);
  ASSERT_EQ_STR(s->data->sources[1]->path, "b/*.bin");
  ASSERT(s->data->sources[0]->weight == 3.0f);
  colo_jobspec_fill_defaults(s);
  ASSERT(s->data->sources[1]->weight == 1.0f);
  ASSERT_EQ_INT(colo_jobspec_validate(s, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_pb_set((ProtobufCMessage **)&s, &colo__v1__job_spec__descriptor,
                            "data.sources={weight: 2}", err, sizeof err),
                0);
  ASSERT_EQ_INT(s->data->n_sources, 3);
  ASSERT_EQ_INT(colo_jobspec_validate(s, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "data.sources[2].path must be set");
  ASSERT_EQ_INT(colo_pb_set((ProtobufCMessage **)&s, &colo__v1__job_spec__descriptor,
                            "data.sources=[{path: x", err, sizeof err),
                COLO_EPARSE);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(notify_urls_are_checked_and_matched_on_a_boundary) {
  char err[256];
  int rc;
  Colo__V1__JobSpec *s =
      parse(BASE "notify: {url: 'https://hooks.example/T1?x=1', on: [started, failed]}\n", err,
            sizeof err, &rc);
  if (rc != 0)
    FAIL_AT("%s", err);
  ASSERT_EQ_STR(s->notify->url, "https://hooks.example/T1?x=1");
  ASSERT_EQ_INT(s->notify->n_on, 2);
  ASSERT_EQ_INT(s->notify->on[0], COLO__V1__NOTIFY_EVENT__NOTIFY_EVENT_STARTED);
  ASSERT_EQ_INT(s->notify->on[1], COLO__V1__NOTIFY_EVENT__NOTIFY_EVENT_FAILED);
  colo__v1__job_spec__free_unpacked(s, NULL);
  char long_url[COLO_MAX_URL + 2] = "https://h.example/";
  size_t head = strlen(long_url);
  memset(long_url + head, 'a', sizeof long_url - 1 - head);
  long_url[COLO_MAX_URL + 1] = '\0';
  ASSERT_EQ_INT(colo_url_check("notify.url", long_url, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "notify.url is 1001 characters long; at most 1000");
  long_url[COLO_MAX_URL] = '\0';
  ASSERT_EQ_INT(colo_url_check("notify.url", long_url, err, sizeof err), 0);
  const char *allow = "https://hooks.example,http://10.0.0.5:8080/colo/";
  const char *yes[] = {"https://hooks.example", "https://hooks.example/T1",
                       "https://hooks.example?a", "https://hooks.example#f",
                       "http://10.0.0.5:8080/colo/x"};
  const char *no[] = {"https://hooks.example.evil/",  "https://hooks.example@evil/",
                      "https://hooks.examplex/",      "http://hooks.example/",
                      "http://10.0.0.5:8080/colonel", "http://10.0.0.5:8080/"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    if (!colo_url_allowed(yes[i], allow))
      FAIL_AT("%s is refused", yes[i]);
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    if (colo_url_allowed(no[i], allow))
      FAIL_AT("%s is allowed", no[i]);
  ASSERT_EQ_INT(colo_url_allowed("https://hooks.example/", ""), 0);
}

TEST(defaults_are_filled) {
  char err[256];
  int rc;
  Colo__V1__JobSpec *s = parse(BASE, err, sizeof err, &rc);
  ASSERT_EQ_INT(rc, 0);
  ASSERT(s->parallel == NULL);
  ASSERT_EQ_INT(colo_jobspec_fill_defaults(s), 0);
  ASSERT_EQ_INT(s->parallel->has_dp, 1);
  ASSERT_EQ_INT(s->parallel->dp, 1);
  ASSERT_EQ_INT(s->model->n_embd, 128);
  ASSERT_EQ_INT(s->train->precision, COLO__V1__PRECISION__PRECISION_FP32);
  ASSERT_EQ_INT(s->max_restarts, 3);
  ASSERT(s->optimizer->weight_decay == 0.1f);
  ASSERT_EQ_INT(colo_jobspec_validate(s, err, sizeof err), 0);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

/* An example job file, parsed, given its defaults and validated; NULL with the reason in err. */
static Colo__V1__JobSpec *example(const char *file, char *err, size_t errlen) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", COLO_SOURCE_DIR, file);
  Colo__V1__JobSpec *s = NULL;
  if (colo_pb_from_yaml_file(path, &colo__v1__job_spec__descriptor, (ProtobufCMessage **)&s, err,
                             errlen) != 0)
    return NULL;
  if (colo_jobspec_fill_defaults(s) != 0 || colo_jobspec_validate(s, err, errlen) != 0) {
    colo__v1__job_spec__free_unpacked(s, NULL);
    return NULL;
  }
  return s;
}

TEST(example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("tinyshakespeare.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(colo_jobspec_world(s), 2);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(gpu_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("gpt-300m-one-gpu.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(s->memory->placement, COLO__V1__PLACEMENT__PLACEMENT_AUTO);
  ASSERT_EQ_INT(s->resources->device, COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(finetune_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("gpt2-finetune.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_STR(s->train->init_from, "gpt2/model.safetensors");
  ASSERT_EQ_INT(s->model->vocab_size, 50257); /* GPT-2's own: its weights must fit */
  ASSERT_EQ_INT(s->model->block_size, 1024);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(fineweb_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("gpt2-124m-fineweb.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(s->data->n_choice_sets, 1);
  ASSERT_EQ_STR(s->data->choice_sets[0]->path, "hellaswag/choices.bin");
  /* llm.c's 524,288 tokens a step */
  ASSERT_EQ_INT(s->parallel->dp * s->train->batch_size * s->model->block_size, 524288);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(llama_finetune_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("llama3-finetune.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_STR(s->train->init_from, "llama-3.2-1b/model.safetensors");
  /* Llama 3.2 1B's shape, as colo-train hf-config prints it (test_init_from checks that) */
  ASSERT_EQ_INT(s->model->arch, COLO__V1__ARCH__ARCH_LLAMA);
  ASSERT_EQ_INT(s->model->n_layer, 16);
  ASSERT_EQ_INT(s->model->n_head, 32);
  ASSERT_EQ_INT(s->model->n_kv_head, 8);
  ASSERT_EQ_INT(s->model->n_embd, 2048);
  ASSERT_EQ_INT(s->model->mlp_hidden, 8192);
  ASSERT_EQ_INT(s->model->vocab_size, 128256);
  ASSERT(s->model->rope_theta == 500000.0f && s->model->rope_scaling_factor == 32.0f);
  ASSERT(s->model->tie_embeddings);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(llama_sft_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("llama3-sft.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_STR(s->train->init_from, "llama-3.2-1b/model.safetensors");
  ASSERT_EQ_STR(s->data->train_path, "my-pairs-llama/train.bin");
  ASSERT_EQ_INT(s->model->vocab_size, 128256);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

/* LoRA on pipeline stages is a valid layout (ZeRO 0); with ZeRO-3 the pipeline's own rule
 * refuses it, as for any run */
TEST(lora_on_pipeline_stages_is_valid) {
  char err[512];
  check(BASE "train: {lora_rank: 8, lora_quant: nf4}\nparallel: {pp: 2, dp: 2, micro_batches: 4}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check(BASE "train: {lora_rank: 8}\nparallel: {pp: 2, zero_stage: 3}\n", err, sizeof err);
  ASSERT_EQ_STR(err,
                "parallel.zero_stage=3 cannot be combined with parallel.pp=2: use stage 0 or 1");
}

/* cancel_on_dependency_failure with a job to wait for, and without (a pipeline's first stage, given
 * it with the rest: it has nothing to cancel it) */
TEST(cancel_on_dependency_failure_is_valid) {
  char err[512];
  check(BASE "cancel_on_dependency_failure: true\nafter: [3]\n", err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check(BASE "cancel_on_dependency_failure: true\n", err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check(BASE "cancel_on_dependency_failure: true\ntrain: {init_from_job: 3}\n", err, sizeof err);
  ASSERT_EQ_STR(err, "");
}

/* DoRA: with NF4 (double-quantized) and dropout, on tensor-parallel ranks, and exported for PEFT */
TEST(dora_is_valid) {
  char err[512];
  check(BASE "train: {lora_rank: 8, lora_dora: true, lora_quant: nf4, lora_dropout: 0.05, "
             "lora_double_quant: true, neftune_alpha: 5, dpo_beta: 0.1}\n"
             "parallel: {tp: 2, sequence_parallel: true}\ncheckpoint: {export_format: peft}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
}

/* the weights' moving average, under ZeRO-3 with its pieces placed off the GPU */
TEST(ema_is_valid) {
  char err[512];
  int rc;
  Colo__V1__JobSpec *s = parse(BASE "train: {ema_decay: 0.999}\nparallel: {dp: 2, zero_stage: 3}\n"
                                    "memory: {placement: auto}\nresources: {device: gpu}\n",
                               err, sizeof err, &rc);
  ASSERT_EQ_INT(rc, 0);
  ASSERT(s->train->ema_decay == 0.999f);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

/* DPO of the whole model (its reference precomputed), under ZeRO-3; a LoRA run precomputing */
TEST(whole_model_dpo_is_valid) {
  char err[512];
  int rc;
  check(BASE "train: {dpo_beta: 0.1}\nparallel: {dp: 2, zero_stage: 3}\n", err, sizeof err);
  ASSERT_EQ_STR(err, "");
  Colo__V1__JobSpec *s = parse(BASE "train: {lora_rank: 8, dpo_beta: 0.1, dpo_precompute: true}\n",
                               err, sizeof err, &rc);
  ASSERT_EQ_INT(rc, 0);
  ASSERT(s->train->has_dpo_precompute && s->train->dpo_precompute);
  colo__v1__job_spec__free_unpacked(s, NULL);
  check(BASE "train: {dpo_beta: 0.1, dpo_loss: ipo, dpo_rpo_alpha: 1}\n", err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check(BASE "train: {dpo_beta: 0.1, dpo_loss: sigmoid, dpo_label_smoothing: 0.2}\n", err,
        sizeof err);
  ASSERT_EQ_STR(err, "");
  check(BASE
        "train: {dpo_beta: 2, dpo_loss: simpo, dpo_simpo_gamma: 1, dpo_label_smoothing: 0.1}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  s = parse(BASE "train: {dpo_beta: 0.1, dpo_loss: orpo}\n", err, sizeof err, &rc);
  ASSERT_EQ_INT(rc, 0);
  ASSERT_EQ_INT(colo_jobspec_fill_defaults(s), 0);
  ASSERT(s->train->dpo_simpo_gamma == 0.5f); /* TRL's default */
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(qwen_lora_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("qwen2.5-lora.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(s->train->lora_rank, 16);
  ASSERT(s->train->lora_alpha == 32.0f);
  ASSERT_EQ_STR(s->train->lora_targets, "all");
  ASSERT_EQ_INT(s->parallel->zero_stage, 0);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(qwen_dpo_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("qwen2.5-dpo.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT(s->train->dpo_beta == 0.1f);
  ASSERT_EQ_INT(s->train->lora_rank, 16);
  ASSERT_EQ_INT(s->train->batch_size % 2, 0);
  ASSERT_EQ_STR(s->data->train_path, "my-prefs-qwen/train.bin");
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(llama_lora_zero3_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("llama3-8b-lora.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(s->train->lora_rank, 16);
  ASSERT_EQ_INT(s->parallel->zero_stage, 3);
  ASSERT_EQ_INT(s->parallel->dp, 8);
  ASSERT_EQ_INT(s->model->n_layer, 32);
  ASSERT_EQ_STR(s->checkpoint->export_format, "gguf-lora");
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(llama_70b_lora_tp_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("llama3-70b-lora-tp.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(s->train->lora_rank, 16);
  ASSERT_EQ_INT(s->parallel->tp, 8);
  ASSERT(s->parallel->sequence_parallel);
  ASSERT_EQ_INT(s->parallel->zero_stage, 0);
  ASSERT_EQ_INT(s->model->n_layer, 80);
  ASSERT_EQ_INT(s->resources->devices_per_node, 8);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(llama_qlora_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("llama3-8b-qlora.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(s->train->lora_rank, 16);
  ASSERT_EQ_STR(s->train->lora_quant, "nf4");
  ASSERT(s->train->lora_double_quant);
  ASSERT(s->train->lora_dropout == 0.1f);
  ASSERT_EQ_INT(s->parallel->zero_stage, 0);
  ASSERT_EQ_INT(s->parallel->dp, 1);
  ASSERT_EQ_STR(s->checkpoint->export_format, "peft");
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(qwen_sft_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("qwen2.5-sft.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  ASSERT_EQ_STR(s->train->init_from, "qwen2.5-0.5b/model.safetensors");
  /* Qwen2.5 0.5B's shape, as colo-train hf-config prints it (test_init_from checks that) */
  ASSERT_EQ_INT(s->model->arch, COLO__V1__ARCH__ARCH_LLAMA);
  ASSERT_EQ_INT(s->model->n_layer, 24);
  ASSERT_EQ_INT(s->model->n_head, 14);
  ASSERT_EQ_INT(s->model->n_kv_head, 2);
  ASSERT_EQ_INT(s->model->n_embd, 896);
  ASSERT_EQ_INT(s->model->mlp_hidden, 4864);
  ASSERT_EQ_INT(s->model->vocab_size, 151936);
  ASSERT(s->model->qkv_bias && s->model->rms_norm_eps == 1e-6f && s->model->rope_theta == 1e6f);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

/* model.head_dim: heads of their own width (Qwen3 0.6B's 128 on 1024), where n_embd need not
 * divide by n_head; NF4 under tensor parallelism then needs the queries' width in blocks too */
TEST(head_dim_sets_the_heads_width) {
  char err[512];
  int rc;
  check(BASE "model: {arch: llama, n_embd: 130, n_head: 4, head_dim: 32}\n", err, sizeof err);
  ASSERT_EQ_STR(err, "");
  Colo__V1__JobSpec *s = parse(BASE "model: {arch: llama, head_dim: 32}\n", err, sizeof err, &rc);
  ASSERT_EQ_INT(rc, 0);
  ASSERT_EQ_INT(s->model->head_dim, 32);
  colo__v1__job_spec__free_unpacked(s, NULL);
  check(BASE "model: {arch: llama, n_embd: 256, n_head: 4, head_dim: 40, mlp_hidden: 512}\n"
             "parallel: {tp: 2}\ntrain: {lora_rank: 4, lora_quant: nf4}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err,
                "train.lora_quant=nf4 with parallel.tp=2 needs the queries' n_head·head_dim/tp "
                "(80) to be a multiple of 64, as n_embd/tp");
}

TEST(qwen3_lora_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("qwen3-lora.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  /* Qwen3 1.7B's shape, as colo-train hf-config prints it (test_init_from checks that) */
  ASSERT_EQ_INT(s->model->arch, COLO__V1__ARCH__ARCH_LLAMA);
  ASSERT_EQ_INT(s->model->n_layer, 28);
  ASSERT_EQ_INT(s->model->n_head, 16);
  ASSERT_EQ_INT(s->model->n_kv_head, 8);
  ASSERT_EQ_INT(s->model->n_embd, 2048);
  ASSERT_EQ_INT(s->model->mlp_hidden, 6144);
  ASSERT_EQ_INT(s->model->vocab_size, 151936);
  ASSERT(s->model->qk_norm && !s->model->qkv_bias && s->model->rms_norm_eps == 1e-6f &&
         s->model->rope_theta == 1e6f);
  ASSERT_EQ_INT(s->train->lora_rank, 16);
  ASSERT_EQ_STR(s->train->init_from, "qwen3-1.7b/model.safetensors.index.json");
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(mistral_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("mistral-7b-lora.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  /* Mistral 7B v0.1's shape, as colo-train hf-config prints it (test_init_from checks that) */
  ASSERT_EQ_INT(s->model->n_layer, 32);
  ASSERT_EQ_INT(s->model->n_kv_head, 8);
  ASSERT_EQ_INT(s->model->mlp_hidden, 14336);
  ASSERT_EQ_INT(s->model->vocab_size, 32000);
  ASSERT_EQ_INT(s->model->sliding_window, 4096);
  ASSERT(s->model->block_size > s->model->sliding_window && !s->model->tie_embeddings &&
         s->model->rope_theta == 1e4f);
  ASSERT_EQ_INT(s->train->lora_rank, 16);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(phi3_example_job_is_valid) {
  char err[512];
  Colo__V1__JobSpec *s = example("phi-3-mini-lora.yaml", err, sizeof err);
  if (!s)
    FAIL_AT("%s", err);
  /* Phi-3 mini 4k's shape, as colo-train hf-config prints it (test_init_from checks that) */
  ASSERT_EQ_INT(s->model->n_layer, 32);
  ASSERT_EQ_INT(s->model->n_head, 32);
  ASSERT_EQ_INT(s->model->n_kv_head, 0); /* every head its own keys */
  ASSERT_EQ_INT(s->model->n_embd, 3072);
  ASSERT_EQ_INT(s->model->mlp_hidden, 8192);
  ASSERT_EQ_INT(s->model->vocab_size, 32064);
  ASSERT_EQ_INT(s->model->sliding_window, 2047);
  ASSERT(s->model->block_size > s->model->sliding_window && !s->model->tie_embeddings &&
         s->model->rope_theta == 1e4f);
  ASSERT_EQ_STR(s->model->hf_layout, "phi3");
  ASSERT_EQ_INT(s->train->lora_rank, 16);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(missing_file_is_named) {
  Colo__V1__JobSpec *s = NULL;
  char err[512];
  ASSERT_EQ_INT(colo_pb_from_yaml_file("/nonexistent/job.yaml", &colo__v1__job_spec__descriptor,
                                       (ProtobufCMessage **)&s, err, sizeof err),
                COLO_EIO);
  ASSERT_EQ_STR(err, "/nonexistent/job.yaml: No such file or directory");
  ASSERT(s == NULL);
}

TEST(path_containment) {
  ASSERT(colo_path_is_contained("a/b.bin"));
  ASSERT(colo_path_is_contained("a..b/c"));
  ASSERT(colo_path_is_contained("./a"));
  ASSERT(!colo_path_is_contained(""));
  ASSERT(!colo_path_is_contained("/abs"));
  ASSERT(!colo_path_is_contained(".."));
  ASSERT(!colo_path_is_contained("a/../../b"));
  ASSERT(!colo_path_is_contained("a/.."));
  ASSERT(!colo_path_is_contained("a\\..\\b"));
  ASSERT(!colo_path_is_contained("a\nb"));
}

/* bf16 on a GPU unless the job says otherwise; fp32 elsewhere; bf16 on the CPU is valid */
TEST(precision_defaults_by_device) {
  static const struct {
    const char *yaml;
    int precision;
  } cases[] = {
      {BASE "resources: {device: gpu}\n", COLO__V1__PRECISION__PRECISION_BF16},
      {BASE "resources: {device: gpu}\ntrain: {steps: 5}\n", COLO__V1__PRECISION__PRECISION_BF16},
      {BASE "resources: {device: gpu}\ntrain: {precision: fp32}\n",
       COLO__V1__PRECISION__PRECISION_FP32},
      {BASE "resources: {device: gpu}\ntrain: {precision: fp16}\n",
       COLO__V1__PRECISION__PRECISION_FP16},
      {BASE "resources: {device: gpu}\ntrain: {tf32: true}\n", /* TF32 is an fp32 mode */
       COLO__V1__PRECISION__PRECISION_FP32},
      {BASE, COLO__V1__PRECISION__PRECISION_FP32},
      {BASE "train: {precision: bf16}\n", COLO__V1__PRECISION__PRECISION_BF16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char err[256];
    int rc;
    Colo__V1__JobSpec *s = parse(cases[i].yaml, err, sizeof err, &rc);
    ASSERT_EQ_INT(rc, 0);
    ASSERT_EQ_INT(colo_jobspec_fill_defaults(s), 0);
    if ((int)s->train->precision != cases[i].precision)
      FAIL_AT("case %zu: precision %d, expected %d", i, (int)s->train->precision,
              cases[i].precision);
    ASSERT_EQ_INT(colo_jobspec_fill_defaults(s), 0); /* filling again changes nothing */
    ASSERT_EQ_INT(s->train->precision, cases[i].precision);
    if (colo_jobspec_validate(s, err, sizeof err) != 0)
      FAIL_AT("case %zu: %s", i, err);
    colo__v1__job_spec__free_unpacked(s, NULL);
  }
}

TEST(json_output_round_trips_enums) {
  char err[256];
  int rc;
  Colo__V1__JobSpec *s = parse(BASE "train: {precision: fp16}\n", err, sizeof err, &rc);
  ASSERT_EQ_INT(rc, 0);
  cJSON *j = colo_pb_to_json(&s->base);
  char *txt = cJSON_PrintUnformatted(j);
  ASSERT_EQ_STR(txt, "{\"name\":\"t\",\"data\":{\"train_path\":\"d/train.bin\",\"val_path\":"
                     "\"d/"
                     "val.bin\",\"sources\":[],\"val_sources\":[],\"choice_sets\":[]},"
                     "\"train\":{\"precision\":"
                     "\"fp16\"},\"after\":[]}");
  cJSON_free(txt);
  cJSON_Delete(j);
  colo__v1__job_spec__free_unpacked(s, NULL);
}

TEST(choice_sets_are_validated) {
  char err[512], doc[512];
#define CHOICE_BASE "name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin, choice_sets: "
  snprintf(doc, sizeof doc, CHOICE_BASE "[{path: hs/choices.bin, name: hs}]}\n%s",
           "train: {eval_interval: 0}\n");
  check(doc, err, sizeof err);
  ASSERT(strstr(err, "data.choice_sets are scored at each evaluation") != NULL);
  /* a path out of the data root, a weight, two of one name, a bad name */
  static const char *const bad[][2] = {
      {"[{path: ../x.bin}]", "data.choice_sets[0].path \"../x.bin\" must be a path relative"},
      {"[{path: x.bin, weight: 2}]", "data.choice_sets[0].weight=2: a multiple-choice set has no "
                                     "weight"},
      {"[{path: x.bin, name: a}, {path: y.bin, name: a}]",
       "data.choice_sets[0] and [1] are both named \"a\""},
      {"[{path: x.bin, name: 'a b'}]", "data.choice_sets[0].name \"a b\" must be 1 to 64"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(doc, sizeof doc, CHOICE_BASE "%s}\ntrain: {eval_interval: 10}\n", bad[i][0]);
    check(doc, err, sizeof err);
    ASSERT(strstr(err, bad[i][1]) != NULL);
  }
  snprintf(doc, sizeof doc, CHOICE_BASE "[{path: hs/choices.bin, name: hellaswag}]}\n%s",
           "train: {eval_interval: 10}\n");
  check(doc, err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check(BASE "train: {choice_questions: 100}\n", err, sizeof err);
  ASSERT_EQ_STR(err, "train.choice_questions=100 limits the questions of data.choice_sets, and the "
                     "job names none");
#undef CHOICE_BASE
}

/* train.steps=0: a model evaluated, not trained. It needs a model and something to evaluate on,
 * no training data, and nothing that writes or picks checkpoints; a warm-up of a training job's
 * file is no matter */
TEST(evaluation_jobs_are_validated) {
  char err[512];
#define EVAL_OK "train: {steps: 0, init_from: m/model.safetensors}\n"
  check("name: t\ndata: {val_path: d/val.bin}\n" EVAL_OK, err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check("name: t\ndata: {choice_sets: [{path: hs/choices.bin, name: hs}]}\n" EVAL_OK, err,
        sizeof err);
  ASSERT_EQ_STR(err, "");
  check("name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\n"
        "optimizer: {warmup_steps: 700}\n"
        "train: {steps: 0, init_from_job: 12, eval_interval: 250}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  static const char *const bad[][2] = {
      {"data: {val_path: d/val.bin}\ntrain: {steps: 0}\n", "it needs a model: train.init_from or "
                                                           "train.init_from_job"},
      {"data: {train_path: d/train.bin}\n" EVAL_OK, "it needs something to evaluate on: "
                                                    "data.val_path, data.val_sources or "
                                                    "data.choice_sets"},
      {"data: {val_path: d/val.bin}\n" EVAL_OK "checkpoint: {keep_best: true}\n",
       "it writes no checkpoint, so checkpoint.keep_best"},
      {"data: {val_path: d/val.bin}\n" EVAL_OK "checkpoint: {interval: 10}\n",
       "it writes no checkpoint, so checkpoint.keep_best, checkpoint.interval"},
      {"data: {val_path: d/val.bin}\ntrain: {steps: 0, init_from: m/x.safetensors, dpo_beta: "
       "0.1}\n",
       "train.dpo_beta's evaluation compares the model with its reference"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char doc[512];
    snprintf(doc, sizeof doc, "name: t\n%s", bad[i][0]);
    check(doc, err, sizeof err);
    static const char lead[] = "train.steps=0 evaluates a model without training it: ";
    ASSERT(strncmp(err, lead, sizeof lead - 1) == 0);
    ASSERT(strstr(err, bad[i][1]) != NULL);
  }
  /* train.init_step: a checkpoint of train.init_from_job's by its step */
  check("name: t\ndata: {val_path: d/val.bin}\ntrain: {steps: 0, init_from_job: 3, init_step: "
        "200}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check("name: t\ndata: {val_path: d/val.bin}\ntrain: {steps: 0, init_from: m/x.safetensors, "
        "init_step: 200}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "train.init_step=200 needs train.init_from_job: it picks that job's "
                     "checkpoint at that step");
  check("name: t\ndata: {val_path: d/val.bin}\ntrain: {steps: 0, init_from_job: 3, init_step: "
        "200, init_pick: best}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err,
                "train.init_step=200 and train.init_pick=best each pick a checkpoint: set one");
  /* a training job still needs its data */
  check("name: t\ndata: {val_path: d/val.bin}\ntrain: {steps: 10}\n", err, sizeof err);
  ASSERT_EQ_STR(err, "data.train_path must be set (or data.sources, a blend)");
#undef EVAL_OK
}

/* Parses and fills defaults: a spec the caller frees */
static Colo__V1__JobSpec *parse_ok(const char *yaml) {
  char err[512];
  int rc;
  Colo__V1__JobSpec *s = parse(yaml, err, sizeof err, &rc);
  if (rc < 0)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(colo_jobspec_fill_defaults(s), 0);
  return s;
}

/* train.best_metric: the validation loss, or a choice set's score by the set's name (which may
 * hold dots); it lets keep_best go without a validation set */
TEST(best_metric_is_validated) {
  char err[512];
  int set = -1, kind = -1;
#define HS_DATA                                                                                    \
  "data: {train_path: d/train.bin, choice_sets: [{path: a/c.bin, name: arc.e}, {path: hs/c.bin, "  \
  "name: hs}]}\n"
  Colo__V1__JobSpec *s = parse_ok("name: t\n" HS_DATA "train: {best_metric: arc.e.acc_norm}\n");
  ASSERT_EQ_INT(colo_best_metric(s, &set, &kind), 0);
  ASSERT(set == 1 && kind == 1);
  colo__v1__job_spec__free_unpacked(s, NULL);
  s = parse_ok("name: t\n" HS_DATA "train: {best_metric: hs.acc_token}\n");
  ASSERT_EQ_INT(colo_best_metric(s, &set, &kind), 0);
  ASSERT(set == 2 && kind == 2);
  colo__v1__job_spec__free_unpacked(s, NULL);
  s = parse_ok("name: t\n" HS_DATA "train: {best_metric: val_loss}\n");
  ASSERT_EQ_INT(colo_best_metric(s, &set, &kind), 0);
  ASSERT(set == 0 && kind == 0);
  colo__v1__job_spec__free_unpacked(s, NULL);
  /* keep_best by a score needs no validation set */
  check("name: t\n" HS_DATA "train: {best_metric: hs.acc, eval_interval: 0}\n"
        "checkpoint: {keep_best: true, interval: 100}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check("name: t\n" HS_DATA
        "train: {eval_interval: 0}\ncheckpoint: {keep_best: true, interval: 100}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "checkpoint.keep_best needs data.val_path or data.val_sources: the best "
                     "checkpoint is the one with the lowest validation loss (or "
                     "train.best_metric: a data.choice_sets score)");
  static const char *const bad[] = {"hs.accuracy", "piqa.acc", "hs", "acc_norm", "arc.acc", "loss"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char doc[512], want[256];
    snprintf(doc, sizeof doc,
             "name: t\n" HS_DATA "train: {best_metric: '%s', eval_interval: 0}\n"
             "checkpoint: {keep_best: true, interval: 100}\n",
             bad[i]);
    check(doc, err, sizeof err);
    snprintf(want, sizeof want,
             "train.best_metric \"%s\" must be val_loss, or NAME.acc, NAME.acc_norm or "
             "NAME.acc_token with NAME one of data.choice_sets",
             bad[i]);
    ASSERT_EQ_STR(err, want);
  }
#undef HS_DATA
}

TEST(muon_is_validated) {
  char err[512];
  check("name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\noptimizer: {name: muon}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check("name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\noptimizer: {name: muon, "
        "muon_momentum: 0.9}\n"
        "parallel: {dp: 2, pp: 2}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  check("name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\noptimizer: {name: muon}\n"
        "parallel: {dp: 2, zero_stage: 3}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  /* tensor parallelism: the matrices' shares are gathered over the group */
  check("name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\noptimizer: {name: muon}\n"
        "parallel: {dp: 2, tp: 2, zero_stage: 1}\n",
        err, sizeof err);
  ASSERT_EQ_STR(err, "");
  Colo__V1__JobSpec *s = parse_ok(
      "name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\noptimizer: {name: muon}\n");
  ASSERT(s->optimizer->name == COLO__V1__OPTIMIZER_NAME__OPTIMIZER_NAME_MUON);
  ASSERT(s->optimizer->muon_momentum == 0.95f);
  ASSERT(s->optimizer->muon_lr == 0.0f &&
         s->optimizer->muon_adjust_lr == COLO__V1__MUON_ADJUST_LR__MUON_ADJUST_LR_MATCH_RMS_ADAMW);
  colo__v1__job_spec__free_unpacked(s, NULL);
  s = parse_ok("name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\n"
               "optimizer: {name: muon, muon_lr: 0.02, muon_adjust_lr: original}\n");
  ASSERT(s->optimizer->muon_lr == 0.02f &&
         s->optimizer->muon_adjust_lr == COLO__V1__MUON_ADJUST_LR__MUON_ADJUST_LR_ORIGINAL);
  colo__v1__job_spec__free_unpacked(s, NULL);
  /* its pieces placed off the device too: Muon's input made by the CPU there */
  s = parse_ok("name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\n"
               "optimizer: {name: muon}\nparallel: {dp: 2, zero_stage: 3}\n"
               "memory: {placement: auto}\nresources: {device: gpu}\n");
  ASSERT(s->optimizer->name == COLO__V1__OPTIMIZER_NAME__OPTIMIZER_NAME_MUON &&
         s->memory->placement == COLO__V1__PLACEMENT__PLACEMENT_AUTO);
  colo__v1__job_spec__free_unpacked(s, NULL);
  static const struct {
    const char *doc, *want;
  } bad[] = {
      {"optimizer: {name: muon}\ntrain: {lora_rank: 8}\n",
       "optimizer.name=muon trains a whole model: train.lora_rank=8's adapters take adamw"},
      {"optimizer: {muon_lr: 0.02}\n", "optimizer.muon_lr needs optimizer.name=muon"},
      {"optimizer: {muon_adjust_lr: original}\n",
       "optimizer.muon_adjust_lr needs optimizer.name=muon"},
      {"optimizer: {name: muon, muon_lr: 11}\n", "optimizer.muon_lr=11 must be 0 (lr) to 10"},

      {"optimizer: {name: muon, muon_momentum: 1}\n",
       "optimizer.muon_momentum=1 must be in [0, 1)"},
      {"optimizer: {name: muon, muon_momentum: -0.5}\n",
       "optimizer.muon_momentum=-0.5 must be in [0, 1)"},
      {"optimizer: {muon_momentum: 0.9}\n",
       "optimizer.muon_momentum=0.9 needs optimizer.name=muon"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char doc[512];
    snprintf(doc, sizeof doc, "name: t\ndata: {train_path: d/train.bin, val_path: d/val.bin}\n%s",
             bad[i].doc);
    check(doc, err, sizeof err);
    ASSERT_EQ_STR(err, bad[i].want);
  }
}

TEST_MAIN()
