"""An independent GPT-2 in PyTorch, written for colo's reference tests and benchmarks: the
HuggingFace computation (pre-LayerNorm, eps 1e-5, learned positions, GELU-tanh, causal attention,
tied LM head, biases) with HF's tensor names and Conv1D layout ([in, out])."""
import math

import torch
import torch.nn.functional as F

# The losses: a target of -1 does not count (colo's loss mask); reduction "mean" over those that
# do, or "sum" for a mean the caller takes over a whole batch of micro-batches


def documents(idx, token):
    """Documents packed in rows (Megatron's reset_position_ids and reset_attention_mask): a
    document begins at each `token` and at each row's start. Returns each token's position in its
    document [B, T], and the attention mask [B, 1, T, T]: query t may see key j when both are in
    the same document and j <= t."""
    Bn, Tn = idx.shape
    causal = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool, device=idx.device))
    ar = torch.arange(Tn, device=idx.device).expand(Bn, Tn)
    begins = idx == token
    begins[:, 0] = True
    doc = begins.long().cumsum(1)  # each token's document number within its row
    first = torch.where(begins, ar, torch.zeros_like(ar)).cummax(1).values
    same = doc[:, :, None] == doc[:, None, :]
    return ar - first, (same & causal)[:, None]


def positions(idx, token):
    """positions [T] and the causal mask [T, T] without documents (token None), else documents()"""
    if token is not None:
        return documents(idx, token)
    Tn = idx.shape[1]
    return (torch.arange(Tn, device=idx.device),
            torch.tril(torch.ones(Tn, Tn, dtype=torch.bool, device=idx.device)))


class GPT2(torch.nn.Module):
    """GPT-2 as HuggingFace computes it; Conv1D weights are [in, out]."""

    def __init__(self, L, NH, C, T, V):
        super().__init__()
        self.L, self.NH, self.C, self.T, self.V = L, NH, C, T, V
        p = torch.nn.ParameterDict()
        z = lambda *s: torch.nn.Parameter(torch.zeros(*s))
        self.names = ["transformer.wte.weight", "transformer.wpe.weight"]
        shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}
        for l in range(L):
            h = "transformer.h.%d." % l
            for n, s in [("ln_1.weight", (C,)), ("ln_1.bias", (C,)),
                         ("attn.c_attn.weight", (C, 3 * C)), ("attn.c_attn.bias", (3 * C,)),
                         ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                         ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
                         ("mlp.c_fc.weight", (C, 4 * C)), ("mlp.c_fc.bias", (4 * C,)),
                         ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))]:
                self.names.append(h + n)
                shapes[h + n] = s
        self.names += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
        shapes["transformer.ln_f.weight"] = shapes["transformer.ln_f.bias"] = (C,)
        self.p = {n: z(*shapes[n]) for n in self.names}
        for i, n in enumerate(self.names):
            self.register_parameter("p%d" % i, self.p[n])
        # True: attention through F.scaled_dot_product_attention (PyTorch 2's fused kernels, as a
        # PyTorch user would write it: bench/engine_gpu); False: the explicit product, softmax and
        # product the correctness tests compare with, rounding where a 16-bit engine stores
        self.sdpa = False
        self.reduction = "mean"
        self.doc_token = None  # documents(): the token that begins each, or None
        self.noise = None  # NEFTune: a tensor added to the embeddings (after the positions)

    def forward(self, idx, targets, store=None):
        """store, when given, is applied to every tensor a 16-bit engine would store (each
        operation's output, and the matrices the products read): bf16 rounding, for example"""
        p, L, NH, C, T, V = self.p, self.L, self.NH, self.C, self.T, self.V
        s = store or (lambda t: t)
        if self.doc_token is None:  # as before documents: a slice, and a mask made only if used
            x = s(p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][: idx.shape[1]])
            mask = None if self.sdpa else positions(idx, None)[1]
        else:
            pos, mask = documents(idx, self.doc_token)
            x = s(p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][pos])
        if self.noise is not None:
            x = s(x + self.noise)
        for l in range(L):
            h = "transformer.h.%d." % l
            a = s(F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5))
            qkv = s(a @ s(p[h + "attn.c_attn.weight"]) + p[h + "attn.c_attn.bias"])
            q, k, v = qkv.split(C, dim=2)
            heads = lambda t: t.view(t.shape[0], T, NH, C // NH).transpose(1, 2)
            q, k, v = heads(q), heads(k), heads(v)
            if self.sdpa and mask is None:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = att @ v
            y = s(y.transpose(1, 2).reshape(x.shape))
            x = s(x + s(y @ s(p[h + "attn.c_proj.weight"]) + p[h + "attn.c_proj.bias"]))
            m = s(F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5))
            m = s(F.gelu(s(m @ s(p[h + "mlp.c_fc.weight"]) + p[h + "mlp.c_fc.bias"]), approximate="tanh"))
            x = s(x + s(m @ s(p[h + "mlp.c_proj.weight"]) + p[h + "mlp.c_proj.bias"]))
        x = s(F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], 1e-5))
        logits = s(x @ s(p["transformer.wte.weight"]).t())
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1), ignore_index=-1,
                               reduction=self.reduction)

    def init_gpt2(self, seed):
        """GPT-2 initialisation, with torch's own random numbers."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n in self.names:
                t = self.p[n]
                if ".ln_" in n and n.endswith(".weight"):
                    t.fill_(1.0)
                elif n.endswith(".bias"):
                    t.zero_()
                else:
                    std = 0.02 / math.sqrt(2 * self.L) if n.endswith("c_proj.weight") else 0.02
                    t.normal_(0.0, std, generator=g)

    def param_groups(self, weight_decay):
        decay = [self.p[n] for n in self.names if self.p[n].dim() == 2]
        no_decay = [self.p[n] for n in self.names if self.p[n].dim() == 1]
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]


def slide(mask, window):
    """a causal mask [..., T, T] cut to a sliding window (None: as it is): query i sees key j
    when i − j < window, as transformers' sliding_window_causal_mask_function"""
    if not window:
        return mask
    ar = torch.arange(mask.shape[-1], device=mask.device)
    return mask & ((ar[:, None] - ar[None, :]) < window)


def rms_norm(x, w, eps=1e-5):
    """Llama's RMSNorm (HF LlamaRMSNorm): x / sqrt(mean(x²) + eps) · w"""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_inv_freq(hs, theta, scaling=None):
    """RoPE's inverse frequencies, and with scaling (a dict of HF's rope_scaling keys, rope_type
    "llama3") Llama 3.1's rescaling: wavelengths past original/low_freq_factor divided by the
    factor, those under original/high_freq_factor kept, the band between a blend."""
    inv = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
    if not scaling:
        return inv
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    orig = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > orig / low, inv / factor, inv)
    smooth = (orig / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < orig / high) & ~(wavelen > orig / low)
    return torch.where(medium, blended, scaled)


def longrope(cfg, hs, seq_len):
    """LongRoPE's inverse frequencies and attention factor, as transformers computes them
    (_compute_longrope_parameters, and the dynamic update that picks long_factor once the sequence
    passes the original context): 1 / (ext · theta^(2i/hs)), and the factor rope_scaling gives,
    else sqrt(1 + ln s / ln original) for s = max_position_embeddings / original above 1."""
    rs = cfg["rope_scaling"]
    if "original_max_position_embeddings" in cfg:
        orig = cfg["original_max_position_embeddings"]
        factor = cfg["max_position_embeddings"] / orig
    else:
        orig, factor = cfg["max_position_embeddings"], rs.get("factor", 1.0)
    af = rs.get("attention_factor")
    if af is None:
        af = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    ext = torch.tensor(rs["long_factor"] if seq_len > orig else rs["short_factor"], dtype=torch.float32)
    shape = torch.arange(0, hs, 2, dtype=torch.int64).float() / hs
    return 1.0 / (ext * cfg["rope_theta"] ** shape), af


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Llama(torch.nn.Module):
    """A Llama block on GPT-2's skeleton, as colo's model.arch=llama names and lays it out:
    RMSNorm (eps 1e-5), rotary positions in HF's rotate-half form on the queries and keys, a SwiGLU
    MLP whose mlp.c_fc.weight [C, 2H] holds the gate's columns then the up projection's, no biases,
    the LM head tied to the token embedding. Weights are [in, out] as GPT-2's Conv1D. qkv_bias and
    eps: Qwen2's biases on q, k and v (attn.c_attn.bias [C + 2·KV]) and its RMSNorm epsilon.
    qk_norm: Qwen3's RMSNorm over each query and key head before the rotation (scales
    attn.q_norm.weight and attn.k_norm.weight [hs]), as Qwen3Attention applies it. head_dim: heads
    of hs values where not C/NH (Qwen3 0.6B's), the queries Q = NH·hs wide: c_attn [C, Q + 2·KV],
    c_proj [Q, C]. window: Mistral 7B v0.1's sliding window, each query attending its `window`
    most recent keys (HF's sliding_window: key j seen by query i when i − j < window)."""

    def __init__(self, L, NH, C, T, V, H, theta=10000.0, NKV=None, untied=False, scaling=None,
                 qkv_bias=False, eps=1e-5, qk_norm=False, head_dim=None, window=None):
        super().__init__()
        self.window = window
        self.L, self.NH, self.C, self.T, self.V, self.H, self.theta = L, NH, C, T, V, H, theta
        self.qkv_bias, self.eps, self.qk_norm = qkv_bias, eps, qk_norm
        self.reduction = "mean"
        # grouped-query attention: NKV key and value heads, c_attn [C, Q + 2·KV]
        self.NKV = NKV or NH
        self.hs = hs = head_dim or C // NH
        self.Q = Q = NH * hs
        KV = self.NKV * hs
        self.KV = KV
        self.names = ["transformer.wte.weight"]
        shapes = {"transformer.wte.weight": (V, C)}
        for l in range(L):
            h = "transformer.h.%d." % l
            for n, s in [("ln_1.weight", (C,)), ("attn.c_attn.weight", (C, Q + 2 * KV))] + \
                    ([("attn.c_attn.bias", (Q + 2 * KV,))] if qkv_bias else []) + \
                    ([("attn.q_norm.weight", (hs,)), ("attn.k_norm.weight", (hs,))]
                     if qk_norm else []) + \
                    [("attn.c_proj.weight", (Q, C)), ("ln_2.weight", (C,)),
                     ("mlp.c_fc.weight", (C, 2 * H)), ("mlp.c_proj.weight", (H, C))]:
                self.names.append(h + n)
                shapes[h + n] = s
        self.names.append("transformer.ln_f.weight")
        shapes["transformer.ln_f.weight"] = (C,)
        self.untied = untied  # a head of its own: lm_head.weight [V, C]
        self.scaling = scaling  # Llama 3.1's rope_scaling, or None
        if untied:
            self.names.append("lm_head.weight")
            shapes["lm_head.weight"] = (V, C)
        self.p = {n: torch.nn.Parameter(torch.zeros(*shapes[n])) for n in self.names}
        for i, n in enumerate(self.names):
            self.register_parameter("p%d" % i, self.p[n])
        self.doc_token = None  # documents(): the token that begins each, or None

    def rope(self, t, pos):
        """t [B, heads, T, hs] rotated by the angles of positions pos: [T], or [B, T] (documents)"""
        hs = t.shape[-1]
        inv_freq = rope_inv_freq(hs, self.theta, self.scaling)
        freqs = pos.to(torch.float32)[..., None] * inv_freq  # [T, hs/2] or [B, T, hs/2]
        if pos.dim() == 2:
            freqs = freqs[:, None]
        emb = torch.cat((freqs, freqs), dim=-1)
        return t * emb.cos() + rotate_half(t) * emb.sin()

    def forward(self, idx, targets, store=None):
        """store, as GPT2.forward's: applied to every tensor a 16-bit engine stores"""
        p, L, NH, C, H = self.p, self.L, self.NH, self.C, self.H
        s = store or (lambda t: t)
        Bn, Tn = idx.shape
        pos, mask = positions(idx, self.doc_token)
        mask = slide(mask, self.window)
        x = s(p["transformer.wte.weight"][idx])
        for l in range(L):
            h = "transformer.h.%d." % l
            a = s(rms_norm(x, p[h + "ln_1.weight"], self.eps))
            qkv = a @ s(p[h + "attn.c_attn.weight"])
            qkv = s(qkv + p[h + "attn.c_attn.bias"] if self.qkv_bias else qkv)
            q, k, v = qkv.split([self.Q, self.KV, self.KV], dim=2)
            heads = lambda t: t.view(Bn, Tn, -1, self.hs).transpose(1, 2)
            # each key and value head serves NH/NKV query heads (HF's repeat_kv)
            rep = lambda t: t.repeat_interleave(NH // self.NKV, dim=1)
            q, k, v = heads(q), rep(heads(k)), rep(heads(v))
            if self.qk_norm:  # each head over its own values, in place in colo's stored qkv
                q = s(rms_norm(q, p[h + "attn.q_norm.weight"], self.eps))
                k = s(rms_norm(k, p[h + "attn.k_norm.weight"], self.eps))
            # colo rotates q and k in place in its stored qkv: rounded once more there
            q, k = s(self.rope(q, pos)), s(self.rope(k, pos))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hs)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = s((att @ v).transpose(1, 2).reshape(Bn, Tn, self.Q))
            x = s(x + s(y @ s(p[h + "attn.c_proj.weight"])))
            m = s(rms_norm(x, p[h + "ln_2.weight"], self.eps))
            gu = s(m @ s(p[h + "mlp.c_fc.weight"]))
            g, u = gu.split(H, dim=2)
            m = s(F.silu(g) * u)
            x = s(x + s(m @ s(p[h + "mlp.c_proj.weight"])))
        x = s(rms_norm(x, p["transformer.ln_f.weight"], self.eps))
        head = p["lm_head.weight"] if self.untied else p["transformer.wte.weight"]
        logits = s(x @ s(head).t())
        return F.cross_entropy(logits.view(-1, self.V), targets.reshape(-1), ignore_index=-1,
                               reduction=self.reduction)

    def param_groups(self, weight_decay):
        decay = [self.p[n] for n in self.names if self.p[n].dim() == 2]
        no_decay = [self.p[n] for n in self.names if self.p[n].dim() == 1]
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]


class HFLlama(torch.nn.Module):
    """LlamaForCausalLM's computation under its own names and layout (nn.Linear weights [out, in],
    model.layers.N.self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, the head tied to
    model.embed_tokens), built from a transformers config.json: what `colo-train export` must
    write for a model.arch=llama model, with grouped-query attention (num_key_value_heads); and
    Qwen2ForCausalLM's (model_type qwen2: biases on q_proj, k_proj and v_proj), and
    Qwen3ForCausalLM's (model_type qwen3: self_attn.q_norm and k_norm, RMSNorm over each head of
    the queries and keys before the rotation, Qwen3Attention's order), and MistralForCausalLM's
    (model_type mistral: a sliding_window on every layer; Qwen's on the layers from
    max_window_layers on, where use_sliding_window, as transformers' layer_types)."""

    def __init__(self, cfg):
        super().__init__()
        assert cfg["model_type"] in ("llama", "qwen2", "qwen3", "mistral")
        self.qwen2, self.qwen3 = cfg["model_type"] == "qwen2", cfg["model_type"] == "qwen3"
        self.cfg = cfg
        C, H, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
        hs = cfg.get("head_dim") or C // cfg["num_attention_heads"]  # transformers' default
        Q, KV = cfg["num_attention_heads"] * hs, cfg["num_key_value_heads"] * hs
        shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
        if not cfg.get("tie_word_embeddings", True):
            shapes["lm_head.weight"] = (V, C)
        for l in range(cfg["num_hidden_layers"]):
            h = "model.layers.%d." % l
            shapes.update({h + "input_layernorm.weight": (C,), h + "post_attention_layernorm.weight": (C,),
                           h + "self_attn.q_proj.weight": (Q, C), h + "self_attn.k_proj.weight": (KV, C),
                           h + "self_attn.v_proj.weight": (KV, C), h + "self_attn.o_proj.weight": (C, Q),
                           h + "mlp.gate_proj.weight": (H, C), h + "mlp.up_proj.weight": (H, C),
                           h + "mlp.down_proj.weight": (C, H)})
            if self.qwen2:
                shapes.update({h + "self_attn.q_proj.bias": (Q,), h + "self_attn.k_proj.bias": (KV,),
                               h + "self_attn.v_proj.bias": (KV,)})
            if self.qwen3:
                shapes.update({h + "self_attn.q_norm.weight": (hs,), h + "self_attn.k_norm.weight": (hs,)})
        self.shapes = shapes
        self.p = {}

    def load(self, tensors):
        """every tensor the layout has, of its shape, and no other"""
        assert sorted(tensors) == sorted(self.shapes), sorted(set(tensors) ^ set(self.shapes))
        for n, t in tensors.items():
            assert tuple(t.shape) == self.shapes[n], (n, tuple(t.shape), self.shapes[n])
        self.p = dict(tensors)

    def forward(self, idx, targets):
        cfg, p = self.cfg, self.p
        NH, C = cfg["num_attention_heads"], cfg["hidden_size"]
        hs, eps = cfg.get("head_dim") or C // NH, cfg["rms_norm_eps"]
        Bn, Tn = idx.shape
        rs = cfg.get("rope_scaling") or {}
        if rs.get("rope_type", rs.get("type")) in ("longrope", "su"):
            inv_freq, factor = longrope(cfg, hs, Tn)
        else:
            inv_freq, factor = rope_inv_freq(hs, cfg["rope_theta"], cfg.get("rope_scaling")), 1.0
        emb = torch.outer(torch.arange(Tn, dtype=torch.float32), inv_freq).repeat(1, 2)
        cos, sin = emb.cos() * factor, emb.sin() * factor
        mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
        x = p["model.embed_tokens.weight"][idx]
        for l in range(cfg["num_hidden_layers"]):
            h = "model.layers.%d." % l
            if cfg["model_type"] == "mistral":
                window = cfg.get("sliding_window")
            elif cfg["model_type"].startswith("qwen") and cfg.get("use_sliding_window"):
                window = cfg["sliding_window"] if l >= cfg.get("max_window_layers", 28) else None
            else:
                window = None
            a = rms_norm(x, p[h + "input_layernorm.weight"], eps)
            heads = lambda t: t.view(Bn, Tn, -1, hs).transpose(1, 2)
            b = (lambda n: p[h + "self_attn.%s_proj.bias" % n]) if self.qwen2 else (lambda n: None)
            q = heads(F.linear(a, p[h + "self_attn.q_proj.weight"], b("q")))
            k = heads(F.linear(a, p[h + "self_attn.k_proj.weight"], b("k")))
            v = heads(F.linear(a, p[h + "self_attn.v_proj.weight"], b("v")))
            if self.qwen3:
                q = rms_norm(q, p[h + "self_attn.q_norm.weight"], eps)
                k = rms_norm(k, p[h + "self_attn.k_norm.weight"], eps)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            group = NH // cfg["num_key_value_heads"]  # repeat_kv
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            y = att.masked_fill(~slide(mask, window), float("-inf")).softmax(-1) @ v
            x = x + F.linear(y.transpose(1, 2).reshape(Bn, Tn, NH * hs), p[h + "self_attn.o_proj.weight"])
            m = rms_norm(x, p[h + "post_attention_layernorm.weight"], eps)
            m = F.silu(F.linear(m, p[h + "mlp.gate_proj.weight"])) * F.linear(m, p[h + "mlp.up_proj.weight"])
            x = x + F.linear(m, p[h + "mlp.down_proj.weight"])
        x = rms_norm(x, p["model.norm.weight"], eps)
        logits = F.linear(x, p.get("lm_head.weight", p["model.embed_tokens.weight"]))  # tied without
        return F.cross_entropy(logits.view(-1, cfg["vocab_size"]), targets.reshape(-1))
