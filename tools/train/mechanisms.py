"""Attention mechanisms in parallel (quadratic, causally masked) form, as in ../../shared/MECHANISMS.md
and the engine's model/mechanisms/*.cc. Each computes the same function as the engine's recurrent
form; the fixed random tensors (slay anchors/omegas, dark G) are buffers exported with the model.

Shapes: q [B, H, T, d], k and v [B, Hkv, T, d] (value dim = head dim), output [B, H, T, d].
Query head h reads kv head h // (H / Hkv), as in the engine.

A mechanism is a plain object (not an nn.Module) called as mech(q, k, v); its checkpoint tensors, if
any, live in an nn.Module `mech.tensors` that the attention layer registers under `mech.tensor_name`
("slay", "dark" or "sliced"), so they are named self_attn.slay.anchors etc. in state_dict().

Runs on torch 1.13 (no scaled_dot_product_attention, no vmap) and 2.x. Feature maps run in fp32 even
under bf16 autocast: exp() of logits is not something to do in 8 bits of mantissa.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

_TORCH_VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
MECHANISMS = ("softmax", "taylor", "slay", "dark", "performer", "lfk", "sliced_relu", "sliding_window", "window_dark")


def expand_kv(x, heads):
    """[B, Hkv, ...] -> [B, H, ...]: each kv head repeated for the query heads of its group."""
    group = heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def compute_dtype(x):
    """fp64 for fp64 inputs (references, golden files), else fp32 (also under bf16 autocast)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def causal_mask(t, device):
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def no_autocast(device):
    return torch.autocast(device_type=device.type, enabled=False) if device.type in ("cuda", "cpu") else _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def gauss_laguerre(n):
    """Nodes t (ascending) and weights a of the n-point Gauss-Laguerre rule for int_0^inf e^-t f(t) dt.
    Same algorithm as the engine's GaussLaguerre (Numerical Recipes' starting points, Newton on L_n)."""
    def laguerre(z):
        p1, p2 = 1.0, 0.0
        for j in range(1, n + 1):
            p3, p2 = p2, p1
            p1 = ((2 * j - 1 - z) * p2 - (j - 1) * p3) / j
        return p1, p2

    t, a, z = [], [], 0.0
    for i in range(n):
        if i == 0:
            z = 3.0 / (1.0 + 2.4 * n)
        elif i == 1:
            z += 15.0 / (1.0 + 2.5 * n)
        else:
            ai = i - 1
            z += (1.0 + 2.55 * ai) / (1.9 * ai) * (z - t[i - 2])
        for _ in range(100):
            ln, ln_1 = laguerre(z)
            step = ln / (n * (ln - ln_1) / z)
            z -= step
            if abs(step) <= 1e-15 * z:
                break
        ln, ln_1 = laguerre(z)
        deriv = n * (ln - ln_1) / z
        t.append(z)
        a.append(1.0 / (z * deriv * deriv))
    return t, a


# Chunk length of the linear-time training forms of slay and dark (T > CHUNK). Their quadratic forms
# cost T x T x m per head; the chunked form C x m plus 2 m d per token (about 2.6x less at T = 256,
# C = 64, m = 256) and computes the same function (tests/train/smoke_test.py checks it in fp64).
CHUNK = 64


def chunked_causal_sums(phi_q, phi_k, v, chunk=CHUNK, key_ref=None):
    """num_t = sum_{j<=t} (phi_q_t . phi_k_j) r_jt v_j and den_t = sum_{j<=t} (phi_q_t . phi_k_j) r_jt,
    chunk by chunk: within a chunk the masked [C, C] form, across chunks a carried state S = sum phi_k v^T,
    z = sum phi_k (the engine's recurrent state). r_jt = 1, or with `key_ref` (keys already divided by
    exp(key_ref_j), key_ref nondecreasing in t: dark's running max) r_jt = exp(key_ref_j - key_ref_t) <= 1,
    the state kept at the reference of its chunk's last key, so no factor exceeds 1.
    phi_q, phi_k [B, H, T, m], v [B, H, T, d], key_ref [B, H, T] -> num [B, H, T, d], den [B, H, T, 1]."""
    b, h, t, m = phi_q.shape
    S = phi_q.new_zeros(b, h, m, v.shape[-1])
    z = phi_q.new_zeros(b, h, m, 1)
    ref = None
    nums, dens = [], []
    # split, not slicing: a slice's backward writes a zero-filled gradient of the whole tensor per chunk.
    pieces = [x.split(chunk, dim=2) for x in (phi_q, phi_k, v)]
    refs = key_ref.split(chunk, dim=2) if key_ref is not None else None
    for i, (q, k, vc) in enumerate(zip(*pieces)):
        s, e = i * chunk, i * chunk + q.shape[2]
        mask = causal_mask(e - s, q.device)
        w = torch.matmul(q, k.transpose(-1, -2))
        if key_ref is not None:
            r = refs[i]
            w = w * torch.exp(torch.where(mask, r[..., None, :] - r[..., :, None], torch.zeros((), dtype=w.dtype,
                                                                                                device=w.device)))
        w = w * mask
        num, den = torch.matmul(w, vc), w.sum(-1, keepdim=True)
        if s > 0:
            carried_num, carried_den = torch.matmul(q, S), torch.matmul(q, z)
            if key_ref is not None:
                bring = torch.exp(ref[..., None] - r)[..., None]  # state reference -> query reference
                carried_num, carried_den = carried_num * bring, carried_den * bring
            num, den = num + carried_num, den + carried_den
        nums.append(num)
        dens.append(den)
        if e < t:  # carry the chunk into the state
            if key_ref is not None:
                end = r[..., -1]
                k = k * torch.exp(r - end[..., None])[..., None]
                if ref is not None:
                    decay = torch.exp(ref - end)[..., None, None]
                    S, z = S * decay, z * decay
                ref = end
            S = S + torch.matmul(k.transpose(-1, -2), vc)
            z = z + k.sum(2)[..., None]
    return torch.cat(nums, dim=2), torch.cat(dens, dim=2)


class Mechanism:
    tensor_name = None
    tensors = None  # an nn.Module holding the checkpoint tensors, or None
    quadratic = False  # slay, dark: True forces the masked quadratic form (the reference) at any T

    def __call__(self, q, k, v):
        return self.forward(q, k, v)


class Softmax(Mechanism):
    """Exact causal softmax attention with a fixed logit scale (the teacher; taylor serves its weights)."""

    def __init__(self, head_dim, kv_heads, params, seed):
        self.scale = float(params.get("scale", 1.0 / math.sqrt(head_dim)))

    def forward(self, q, k, v):
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None and q.is_cuda and _TORCH_VERSION >= (2, 1):  # 2.1 added `scale`
            return sdpa(q, k, v, is_causal=True, scale=self.scale)
        with no_autocast(q.device):
            dtype = compute_dtype(q)
            logits = self.scale * torch.matmul(q.to(dtype), k.to(dtype).transpose(-1, -2))
            logits = logits.masked_fill(~causal_mask(q.shape[2], q.device), float("-inf"))
            return torch.matmul(torch.softmax(logits, dim=-1), v.to(dtype)).to(q.dtype)


class Taylor(Mechanism):
    """SATA's function in parallel form: weights T_P(s q.k) = sum_{p<P} x^p / p! (evaluation only:
    taylor serves softmax-trained weights; there is nothing to train)."""

    def __init__(self, head_dim, kv_heads, params, seed):
        self.scale = float(params.get("scale", 1.0 / math.sqrt(head_dim)))
        self.order = int(params.get("order", 4))

    def forward(self, q, k, v):
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
        with no_autocast(q.device):
            dtype = compute_dtype(q)
            x = self.scale * torch.matmul(q.to(dtype), k.to(dtype).transpose(-1, -2))
            w, term = torch.ones_like(x), torch.ones_like(x)
            for p in range(1, self.order):
                term = term * x / p
                w = w + term
            w = w * causal_mask(q.shape[2], q.device)
            den = w.sum(-1, keepdim=True)
            # The engine's guard: only a denominator below 1e-30 in magnitude is replaced.
            tiny = torch.where(den < 0, torch.full_like(den, -1e-30), torch.full_like(den, 1e-30))
            den = torch.where(den.abs() >= 1e-30, den, tiny)
            return (torch.matmul(w, v.to(dtype)) / den).to(q.dtype)


class SlayTensors(nn.Module):
    """Checkpoint tensors self_attn.slay.anchors [P, d] (unit rows) and slay.omega [R, Hkv, d, M]."""

    def __init__(self, head_dim, kv_heads, nodes, anchors, features, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(anchors, head_dim, generator=g, dtype=torch.float64)
        self.register_buffer("anchors", (a / a.norm(dim=1, keepdim=True)).float())
        self.register_buffer("omega", torch.randn(nodes, kv_heads, head_dim, features, generator=g))


class Slay(Mechanism):
    """Spherical Yat kernel: psi[r,p,i](u) = poly_p(u^) prf_{r,i}(u^), y = psi(q)^T S / (psi(q).z + delta)."""

    def __init__(self, head_dim, kv_heads, params, seed):
        self.nodes = int(params.get("nodes", 2))
        self.num_anchors = int(params.get("anchors", 8))
        self.features = int(params.get("features", 16))
        self.eps = float(params.get("eps", 1e-3))
        self.delta = float(params.get("delta", 1e-6))
        t, a = gauss_laguerre(self.nodes)
        c = 2.0 + self.eps
        self.node_s = [x / c for x in t]
        self.node_w = [x / c for x in a]
        self.tensor_name = "slay"
        self.tensors = SlayTensors(head_dim, kv_heads, self.nodes, self.num_anchors, self.features, seed)

    def features_of(self, u, omega):
        """u [B, Hu, T, d] with omega [R, Hu, d, M] (already expanded to u's heads) -> psi [B, Hu, T, R*P*M]."""
        unit = u / u.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        anchors = self.tensors.anchors.to(u.dtype)
        anchors = anchors / anchors.norm(dim=1, keepdim=True)  # the engine renormalizes loaded rows too
        poly = torch.matmul(unit, anchors.t()).square() / math.sqrt(self.num_anchors)  # [B, Hu, T, P]
        prf = []
        for r in range(self.nodes):
            s_r, w_r = self.node_s[r], self.node_w[r]
            proj = torch.matmul(unit, omega[r].to(u.dtype))  # [B, Hu, T, M]
            prf.append(math.sqrt(w_r) * torch.exp((math.sqrt(2 * s_r) * proj - s_r).clamp(-20, 20))
                       / math.sqrt(self.features))
        prf = torch.stack(prf, dim=-2)  # [B, Hu, T, R, M]
        psi = poly[..., None, :, None] * prf[..., :, None, :]  # [B, Hu, T, R, P, M]
        return psi.flatten(-3)

    def forward(self, q, k, v):
        heads = q.shape[1]
        with no_autocast(q.device):
            dtype = compute_dtype(q)
            omega = self.tensors.omega
            psi_k = expand_kv(self.features_of(k.to(dtype), omega), heads)
            psi_q = self.features_of(q.to(dtype), expand_kv(omega, heads))  # omega's dim 1 is the kv head
            v = expand_kv(v.to(dtype), heads)
            if self.quadratic or q.shape[2] <= CHUNK:
                w = torch.matmul(psi_q, psi_k.transpose(-1, -2)) * causal_mask(q.shape[2], q.device)
                num, den = torch.matmul(w, v), w.sum(-1, keepdim=True)
            else:
                num, den = chunked_causal_sums(psi_q, psi_k, v)
            return (num / (den + self.delta)).to(q.dtype)


def orthogonal_gaussian(rows, r, g):
    """[rows, r]: orthonormal r x r blocks with chi_r row norms (each row marginally N(0, I_r))."""
    out = torch.empty(rows, r, dtype=torch.float64)
    for f0 in range(0, rows, r):
        block = torch.linalg.qr(torch.randn(r, r, generator=g, dtype=torch.float64))[0].t()
        norms = torch.randn(r, r, generator=g, dtype=torch.float64).norm(dim=1, keepdim=True)
        n = min(r, rows - f0)
        out[f0:f0 + n] = (block * norms)[:n]
    return out


class DarkTensors(nn.Module):
    """Checkpoint tensors self_attn.dark.M [Hkv, r, d] (learned, identity at init; frozen for performer)
    and dark.G [Hkv, m, r] (fixed Gaussian draws)."""

    def __init__(self, head_dim, kv_heads, features, rank, learn_m, seed, learn_g=False):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        eye = torch.eye(rank, head_dim)
        if rank < head_dim:
            eye = eye + 0.01 * torch.randn(rank, head_dim, generator=g)
        m = eye.expand(kv_heads, rank, head_dim).clone()
        if learn_m:
            self.M = nn.Parameter(m)
        else:
            self.register_buffer("M", m)
        G = torch.stack([orthogonal_gaussian(features, rank, g) for _ in range(kv_heads)]).float()
        if learn_g:  # the learned-feature-kernel baseline (DARKFormer's LFK): the projections train
            self.G = nn.Parameter(G)
        else:
            self.register_buffer("G", G)


class Dark(Mechanism):
    """DARKFormer positive random features: phi_f(x) = exp(w_f.x' - |M x'|^2 / 2) / sqrt(m), x' = sqrt(s) x,
    W = G M. performer is the special case M = I (not trained)."""

    def __init__(self, head_dim, kv_heads, params, seed, performer=False, learn_g=False):
        self.scale = float(params.get("scale", 1.0 / math.sqrt(head_dim)))
        self.features = int(params.get("features", 256))
        self.rank = int(params.get("rank", head_dim))
        self.delta = float(params.get("delta", 1e-6))
        if performer and self.rank != head_dim:
            raise ValueError("performer: M is the identity, so rank must equal head_dim")
        self.tensor_name = "dark"
        self.tensors = DarkTensors(head_dim, kv_heads, self.features, self.rank, not performer, seed, learn_g)

    def features_of(self, q, k):
        """Shifted features of the queries and keys, in the compute dtype: phi_q [B, H, T, m] (each
        query by its own max cq [B, H, T, 1]) and phi_k [B, Hkv, T, m] (each key by its own max
        ck [B, Hkv, T]); canonical phi = exp(shift) * phi. The shifts carry no gradient."""
        heads = q.shape[1]
        dtype = compute_dtype(q)
        M, G = self.tensors.M.to(dtype), self.tensors.G.to(dtype)
        W = torch.matmul(G, M)  # [Hkv, m, d]
        lk = self.logits(k.to(dtype), W, M)
        lq = self.logits(q.to(dtype), expand_kv(W[None], heads)[0], expand_kv(M[None], heads)[0])
        cq = lq.detach().amax(-1, keepdim=True)
        ck = lk.detach().amax(-1)
        inv_sqrt_m = 1.0 / math.sqrt(self.features)
        return torch.exp(lq - cq) * inv_sqrt_m, cq, torch.exp(lk - ck[..., None]) * inv_sqrt_m, ck

    def logits(self, x, W, M):
        """x [B, Hx, T, d], W [Hx, m, d], M [Hx, r, d] -> l [B, Hx, T, m]."""
        x = math.sqrt(self.scale) * x
        mx = torch.matmul(x, M.transpose(-1, -2))  # [B, Hx, T, r]
        return torch.matmul(x, W.transpose(-1, -2)) - 0.5 * mx.square().sum(-1, keepdim=True)

    def forward(self, q, k, v):
        heads, t = q.shape[1], q.shape[2]
        with no_autocast(q.device):
            dtype = compute_dtype(q)
            M, G = self.tensors.M.to(dtype), self.tensors.G.to(dtype)
            W = torch.matmul(G, M)  # [Hkv, m, d]
            lk = self.logits(k.to(dtype), W, M)
            lq = self.logits(q.to(dtype), expand_kv(W[None], heads)[0], expand_kv(M[None], heads)[0])
            # Stabilization as in the engine (the shifts cancel in num / den, so they carry no gradient):
            # queries by their own max over features, key j by c_j, the causal running max of key
            # logits, brought to query t's reference by exp(c_j - c_t) <= 1.
            cq = lq.detach().amax(-1, keepdim=True)  # [B, H, T, 1]
            c = torch.cummax(lk.detach().amax(-1), dim=-1)[0]  # [B, Hkv, T]
            inv_sqrt_m = 1.0 / math.sqrt(self.features)
            phi_q = torch.exp(lq - cq) * inv_sqrt_m
            phi_k = torch.exp(lk - c[..., None]) * inv_sqrt_m
            c = expand_kv(c, heads)
            phi_k, v = expand_kv(phi_k, heads), expand_kv(v.to(dtype), heads)
            if self.quadratic or t <= CHUNK:
                mask = causal_mask(t, q.device)
                shift = torch.exp(torch.where(mask, c[..., None, :] - c[..., :, None],
                                              torch.zeros((), dtype=dtype, device=q.device)))
                w = torch.matmul(phi_q, phi_k.transpose(-1, -2)) * shift * mask
                num, den = torch.matmul(w, v), w.sum(-1, keepdim=True)
            else:
                num, den = chunked_causal_sums(phi_q, phi_k, v, key_ref=c)
            return (guarded_ratio(num, den, cq + c[..., None], self.delta)).to(q.dtype)


class SlicedTensors(nn.Module):
    """The score projections Pi_q, Pi_k ("mlp": Linear(HD, HD) + GELU(erf) + Linear(HD, H), with biases),
    named self_attn.sliced.q_fc1.weight etc. Initialized as the engine's random init: weights
    N(0, gain / fan_in), gain 1 before the GELU and 2 after it, biases N(0, 0.1^2), so unit-variance
    inputs give scores of about unit variance."""

    def __init__(self, head_dim, heads, kv_heads, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        for side, groups in (("q", heads), ("k", kv_heads)):
            width = groups * head_dim
            fc1, fc2 = nn.Linear(width, width), nn.Linear(width, groups)
            with torch.no_grad():
                fc1.weight.copy_(torch.randn(width, width, generator=g) / math.sqrt(width))
                fc1.bias.copy_(0.1 * torch.randn(width, generator=g))
                fc2.weight.copy_(torch.randn(groups, width, generator=g) * math.sqrt(2.0 / width))
                fc2.bias.copy_(0.1 * torch.randn(groups, generator=g))
            self.add_module(side + "_fc1", fc1)
            self.add_module(side + "_fc2", fc2)

    def scores(self, side, x):
        """x [B, G, T, d] -> z [B, G, T]: one score per group from the token's concatenated heads."""
        b, groups, t, d = x.shape
        fc1, fc2 = getattr(self, side + "_fc1"), getattr(self, side + "_fc2")
        flat = x.transpose(1, 2).reshape(b, t, groups * d)
        hidden = F.gelu(F.linear(flat, fc1.weight.to(x.dtype), fc1.bias.to(x.dtype)))
        return F.linear(hidden, fc2.weight.to(x.dtype), fc2.bias.to(x.dtype)).transpose(1, 2)


class SlicedRelu(Mechanism):
    """Causal sliced ReLU attention with the "mlp" projection (engine: model/mechanisms/sliced_relu.cc):
    y_t = sum_{j<=t} ReLU(x - z_j)(v_j - vbar_t) / sum_{j<=t} |x - z_j|, x = z^q_t of the query head,
    z_j = z^k_j of its kv head, vbar_t = mean(v_1..v_t); 0 where the denominator is 0 (all keys = x).
    The engine serves it with the bucketed decoder over [z_min, z_max) (an approximation of this exact
    form) or the exact tree decoder; `record_scores` keeps the last scores so the trainer can choose
    the bucketed range from data."""

    def __init__(self, head_dim, heads, kv_heads, params, seed):
        self.tensor_name = "sliced"
        self.tensors = SlicedTensors(head_dim, heads, kv_heads, seed)
        self.record_scores = False
        self.last_scores = None

    def forward(self, q, k, v):
        heads, t = q.shape[1], q.shape[2]
        with no_autocast(q.device):
            dtype = compute_dtype(q)
            zq = self.tensors.scores("q", q.to(dtype))  # [B, H, T]
            zk = self.tensors.scores("k", k.to(dtype))  # [B, Hkv, T]
            if self.record_scores:
                self.last_scores = (zq.detach(), zk.detach())
            zk = expand_kv(zk, heads)
            vv = expand_kv(v.to(dtype), heads)
            mask = causal_mask(t, q.device)
            diff = zq[..., :, None] - zk[..., None, :]  # [B, H, T(query), T(key)]
            relu = diff.clamp_min(0) * mask
            den = (diff.abs() * mask).sum(-1, keepdim=True)
            count = torch.arange(1, t + 1, device=q.device, dtype=dtype)[:, None]
            vbar = torch.cumsum(vv, dim=2) / count
            num = torch.matmul(relu, vv) - vbar * relu.sum(-1, keepdim=True)
            positive = den > 0
            y = torch.where(positive, num / torch.where(positive, den, torch.ones_like(den)), torch.zeros_like(num))
            return y.to(q.dtype)


class SlidingWindow(Mechanism):
    """Softmax over the last W positions (key j visible from query t when t - W < j <= t), as the
    engine's sliding_window (model/mechanisms/sliding_window.cc) and Hugging Face's Mistral mask."""

    def __init__(self, head_dim, kv_heads, params, seed):
        self.scale = float(params.get("scale", 1.0 / math.sqrt(head_dim)))
        if "window" not in params:
            raise ValueError("sliding_window: \"window\" is required")
        self.window = int(params["window"])

    def forward(self, q, k, v):
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
        with no_autocast(q.device):
            dtype = compute_dtype(q)
            t = q.shape[2]
            logits = self.scale * torch.matmul(q.to(dtype), k.to(dtype).transpose(-1, -2))
            logits = logits.masked_fill(~window_mask(t, self.window, q.device), float("-inf"))
            return torch.matmul(torch.softmax(logits, dim=-1), v.to(dtype)).to(q.dtype)


def window_mask(t, window, device):
    """[T, T] bool: key j is in query i's window, i - W < j <= i."""
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None, :]
    return (j <= i) & (j > i - window)


class WindowDarkTensors(DarkTensors):
    """dark's M and G plus self_attn.dark.gate [heads]: the weight of the linear (dark) part against
    the window, one per query head, >= 0 (1 at init: then both parts estimate the same exp kernel)."""

    def __init__(self, head_dim, heads, kv_heads, features, rank, seed):
        super().__init__(head_dim, kv_heads, features, rank, True, seed)
        self.gate = nn.Parameter(torch.ones(heads))


class WindowDark(Dark):
    """A sliding window with a dark state over the tokens it evicted (LoLCATs' and Based's hybrid,
    the engine's model/mechanisms/window_dark.cc): for query t, keys j in (t - W, t] enter exactly,
    with weight exp(s q.k_j), and keys j <= t - W through dark's features, with weight
    gate_h phi(q).phi(k_j), in one normalizer:
        y_t = (sum_win e^{s q.k_j} v_j + gate sum_lin phi(q).phi(k_j) v_j) / (the same with v_j = 1).
    The denominator is never 0 (the token itself is in its window), so there is no guard."""

    def __init__(self, head_dim, heads, kv_heads, params, seed):
        # The engine's default is 64 features for window_dark (256 for dark): the far past needs fewer.
        super().__init__(head_dim, kv_heads, dict(params, features=params.get("features", 64)), seed)
        if "window" not in params:
            raise ValueError("window_dark: \"window\" is required")
        self.window = int(params["window"])
        self.tensors = WindowDarkTensors(head_dim, heads, kv_heads, self.features, self.rank, seed)

    def forward(self, q, k, v):
        heads, t = q.shape[1], q.shape[2]
        with no_autocast(q.device):
            dtype = compute_dtype(q)
            phi_q, cq, phi_k, ck = self.features_of(q, k)
            kk, vv = expand_kv(k.to(dtype), heads), expand_kv(v.to(dtype), heads)
            phi_k, ck = expand_kv(phi_k, heads), expand_kv(ck, heads)
            gate = self.tensors.gate.to(dtype)[None, :, None, None]  # [1, H, 1, 1]
            a = self.scale * torch.matmul(q.to(dtype), kk.transpose(-1, -2))  # window logits [B, H, T, T]
            i = torch.arange(t, device=q.device)[:, None]
            j = torch.arange(t, device=q.device)[None, :]
            in_window, in_linear = (j <= i) & (j > i - self.window), j <= i - self.window
            # Per query, a reference R >= every exponent below: the window's max logit and the linear
            # part's largest cq + ck_j + log gate (no gradient: it cancels in the ratio).
            neg = torch.tensor(float("-inf"), dtype=dtype, device=q.device)
            ref = torch.where(in_window, a.detach(), neg).amax(-1, keepdim=True)
            log_gate = torch.log(gate.detach().clamp_min(1e-30))
            lin_ref = torch.where(in_linear, cq + ck[..., None, :], neg).amax(-1, keepdim=True) + log_gate
            ref = torch.maximum(ref, lin_ref)
            zero = torch.zeros((), dtype=dtype, device=q.device)
            w_win = torch.exp(torch.where(in_window, a - ref, neg))
            lin_shift = torch.exp(torch.where(in_linear, cq + ck[..., None, :] - ref, neg))
            w_lin = gate * torch.matmul(phi_q, phi_k.transpose(-1, -2)) * lin_shift
            w = w_win + torch.where(in_linear, w_lin, zero)
            return (torch.matmul(w, vv) / w.sum(-1, keepdim=True)).to(q.dtype)


def guarded_ratio(num, den, log_shift, delta):
    """num / den with the Performer's guard (den += 2 delta where |den| < delta) applied to the canonical
    denominator den * exp(log_shift), tested in logs as the engine does; elsewhere exactly num / den."""
    abs_den = den.abs()
    safe = torch.where(abs_den > 0, abs_den, torch.ones_like(abs_den))
    log_den = torch.log(safe) + log_shift
    guard = (log_den < math.log(delta)) | (abs_den == 0)
    rho = torch.exp(torch.clamp(log_den - math.log(delta), max=0.0))
    factor = torch.where(abs_den == 0, torch.zeros_like(rho), rho / (rho + 2))
    ratio = num / torch.where(abs_den > 0, den, torch.ones_like(den))
    return torch.where(guard, ratio * factor, ratio)


def make_mechanism(name, head_dim, kv_heads, params, seed, heads=None):
    if name == "softmax":
        return Softmax(head_dim, kv_heads, params, seed)
    if name == "taylor":
        return Taylor(head_dim, kv_heads, params, seed)
    if name == "slay":
        return Slay(head_dim, kv_heads, params, seed)
    if name in ("dark", "performer", "lfk"):
        return Dark(head_dim, kv_heads, params, seed, performer=(name == "performer"), learn_g=(name == "lfk"))
    if name == "sliding_window":
        return SlidingWindow(head_dim, kv_heads, params, seed)
    if name == "window_dark":
        return WindowDark(head_dim, heads or kv_heads, kv_heads, params, seed)
    if name == "sliced_relu":
        if params.get("projection", "mlp") != "mlp":
            raise ValueError("sliced_relu: the trainer implements the \"mlp\" projection only")
        return SlicedRelu(head_dim, heads or kv_heads, kv_heads, params, seed)
    raise ValueError("unknown mechanism %r (trainer supports %s)" % (name, ", ".join(MECHANISMS)))
