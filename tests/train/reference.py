"""Token-by-token recurrent forms of the mechanisms, written from ../../shared/MECHANISMS.md in plain
loops (fp64), independent of tools/train/mechanisms.py's matrix code. The trainer's parallel forms
must compute the same function as these (and as the engine's Step functions).

Shapes: q [H, T, d], k, v [Hkv, T, d] (one sequence); returns y [H, T, d].
"""
import itertools
import math

import torch


def softmax(q, k, v, scale):
    heads, t, _ = q.shape
    group = heads // k.shape[0]
    y = torch.zeros_like(q)
    for h in range(heads):
        g = h // group
        for i in range(t):
            w = torch.exp(scale * (k[g, :i + 1] @ q[h, i]))
            y[h, i] = (w[:, None] * v[g, :i + 1]).sum(0) / w.sum()
    return y


def taylor(q, k, v, scale, order):
    """The SATA state: for each degree p, H_p = sum alpha_p Phi_p(k) v^T over monomials
    i_1 <= ... <= i_p, read with C_p Phi_p(q)."""
    heads, t, d = q.shape
    group = heads // k.shape[0]
    tables = []
    for p in range(order):
        rows = list(itertools.combinations_with_replacement(range(d), p))
        mult = [math.factorial(p) / math.prod(math.factorial(r.count(x)) for x in set(r)) for r in rows]
        tables.append((p, rows, torch.tensor(mult, dtype=torch.float64)))

    def phi(x, rows):
        return torch.stack([torch.prod(x[list(r)]) if r else torch.tensor(1.0, dtype=x.dtype) for r in rows])

    y = torch.zeros_like(q)
    for g in range(k.shape[0]):
        H = [torch.zeros(len(rows), d, dtype=q.dtype) for _, rows, _ in tables]
        z = [torch.zeros(len(rows), dtype=q.dtype) for _, rows, _ in tables]
        for i in range(t):
            for p, rows, _ in tables:
                f = scale ** p / math.factorial(p) * phi(k[g, i], rows)
                H[p] += f[:, None] * v[g, i][None, :]
                z[p] += f
            for h in range(g * group, (g + 1) * group):
                num, den = torch.zeros(d, dtype=q.dtype), 0.0
                for p, rows, mult in tables:
                    gq = mult * phi(q[h, i], rows)
                    num += H[p].t() @ gq
                    den += gq @ z[p]
                y[h, i] = num / den
    return y


def slay(q, k, v, anchors, omega, node_s, node_w, delta=1e-6):
    """anchors [P, d], omega [R, Hkv, d, M]."""
    heads, t, d = q.shape
    kv_heads = k.shape[0]
    group = heads // kv_heads
    n_anchor, m = anchors.shape[0], omega.shape[3]
    anchors = anchors / anchors.norm(dim=1, keepdim=True)  # the engine renormalizes rows on load

    def psi(u, g):
        u = u / max(u.norm().item(), 1e-12)
        out = []
        for r in range(len(node_s)):
            for a in range(n_anchor):
                poly = (anchors[a] @ u) ** 2 / math.sqrt(n_anchor)
                for i in range(m):
                    x = math.sqrt(2 * node_s[r]) * (omega[r, g, :, i] @ u) - node_s[r]
                    out.append(poly * math.sqrt(node_w[r]) * math.exp(min(max(x.item(), -20), 20)) / math.sqrt(m))
        return torch.tensor(out, dtype=torch.float64)

    y = torch.zeros_like(q)
    for g in range(kv_heads):
        S = torch.zeros(len(node_s) * n_anchor * m, d, dtype=torch.float64)
        z = torch.zeros(S.shape[0], dtype=torch.float64)
        for i in range(t):
            f = psi(k[g, i], g)
            S += f[:, None] * v[g, i][None, :]
            z += f
            for h in range(g * group, (g + 1) * group):
                fq = psi(q[h, i], g)
                y[h, i] = (S.t() @ fq) / (fq @ z + delta)
    return y


def dark(q, k, v, M, G, scale, delta=1e-6):
    """M [Hkv, r, d], G [Hkv, m, r]. Unstabilized canonical sums in fp64 (inputs are small), the guard
    on the canonical denominator."""
    heads, t, d = q.shape
    kv_heads = k.shape[0]
    group = heads // kv_heads
    m = G.shape[1]
    y = torch.zeros_like(q)
    for g in range(kv_heads):
        W = G[g] @ M[g]

        def phi(x):
            x = math.sqrt(scale) * x
            return torch.exp(W @ x - 0.5 * (M[g] @ x).square().sum()) / math.sqrt(m)

        S = torch.zeros(m, d, dtype=torch.float64)
        z = torch.zeros(m, dtype=torch.float64)
        for i in range(t):
            f = phi(k[g, i])
            S += f[:, None] * v[g, i][None, :]
            z += f
            for h in range(g * group, (g + 1) * group):
                fq = phi(q[h, i])
                den = fq @ z
                if abs(den) < delta:
                    den = den + 2 * delta
                y[h, i] = (S.t() @ fq) / den
    return y


def sliced_relu(zq, zk, v):
    """zq [H, T], zk [Hkv, T] (the projected scores), v [Hkv, T, d]. Per query the ReLU prefix identity of
    MECHANISMS.md over the keys so far sorted by z: sum_{z_j < x} (x - z_j) v_j = x A(x) - B(x), A = sum v,
    B = sum z v; the denominator sum |x - z_j| = 2 r1(x) - (x t - sum z); centered by the prefix mean."""
    heads, t = zq.shape
    kv_heads = zk.shape[0]
    group = heads // kv_heads
    y = torch.zeros(heads, t, v.shape[-1], dtype=torch.float64)
    for g in range(kv_heads):
        keys = []
        for i in range(t):
            keys.append((zk[g, i].item(), v[g, i]))
            keys.sort(key=lambda kv: kv[0])
            vsum = sum(kv[1] for kv in keys)
            zsum = sum(kv[0] for kv in keys)
            for h in range(g * group, (g + 1) * group):
                x = zq[h, i].item()
                below = [kv for kv in keys if kv[0] < x]
                a = sum((kv[1] for kv in below), torch.zeros_like(vsum))
                b = sum((kv[0] * kv[1] for kv in below), torch.zeros_like(vsum))
                r1 = sum(x - kv[0] for kv in below)
                rv = x * a - b
                den = 2 * r1 - (x * (i + 1) - zsum)
                y[h, i] = (rv - vsum / (i + 1) * r1) / den if den > 0 else 0.0
    return y
