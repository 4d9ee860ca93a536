"""An independent GPT-2 in PyTorch, written for colo's reference tests and benchmarks: the
HuggingFace computation (pre-LayerNorm, eps 1e-5, learned positions, GELU-tanh, causal attention,
tied LM head, biases) with HF's tensor names and Conv1D layout ([in, out])."""
import math

import torch
import torch.nn.functional as F


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
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))
        # True: attention through F.scaled_dot_product_attention (PyTorch 2's fused kernels, as a
        # PyTorch user would write it: bench/engine_gpu); False: the explicit product, softmax and
        # product the correctness tests compare with, rounding where a 16-bit engine stores
        self.sdpa = False

    def forward(self, idx, targets, store=None):
        """store, when given, is applied to every tensor a 16-bit engine would store (each
        operation's output, and the matrices the products read): bf16 rounding, for example"""
        p, L, NH, C, T, V = self.p, self.L, self.NH, self.C, self.T, self.V
        s = store or (lambda t: t)
        x = s(p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][: idx.shape[1]])
        for l in range(L):
            h = "transformer.h.%d." % l
            a = s(F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5))
            qkv = s(a @ s(p[h + "attn.c_attn.weight"]) + p[h + "attn.c_attn.bias"])
            q, k, v = qkv.split(C, dim=2)
            heads = lambda t: t.view(t.shape[0], T, NH, C // NH).transpose(1, 2)
            q, k, v = heads(q), heads(k), heads(v)
            if self.sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
                att = att.masked_fill(~self.mask[: idx.shape[1], : idx.shape[1]], float("-inf")).softmax(dim=-1)
                y = att @ v
            y = s(y.transpose(1, 2).reshape(x.shape))
            x = s(x + s(y @ s(p[h + "attn.c_proj.weight"]) + p[h + "attn.c_proj.bias"]))
            m = s(F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5))
            m = s(F.gelu(s(m @ s(p[h + "mlp.c_fc.weight"]) + p[h + "mlp.c_fc.bias"]), approximate="tanh"))
            x = s(x + s(m @ s(p[h + "mlp.c_proj.weight"]) + p[h + "mlp.c_proj.bias"]))
        x = s(F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], 1e-5))
        logits = s(x @ s(p["transformer.wte.weight"]).t())
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))

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
