"""The pieces of a softmax-to-constant-state conversion (convert.py): capturing a teacher's attention,
the calibration statistics of its queries and keys and the dark initializations built from them,
the attention-transfer loss (stage 1), low-rank adapters (stage 2) and the evaluation.

Shapes follow mechanisms.py: q [B, H, T, d], k and v [B, Hkv, T, d].
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize


class Recorder:
    """Stands in for a layer's mechanism: calls it and keeps its inputs and output (no gradient)."""

    def __init__(self, mechanism):
        self.inner = mechanism
        self.q = self.k = self.v = self.y = None

    def __call__(self, q, k, v):
        y = self.inner(q, k, v)
        self.q, self.k, self.v, self.y = q.detach(), k.detach(), v.detach(), y.detach()
        return y


def record_attention(model):
    """Wraps every layer's mechanism in a Recorder; returns the recorders, layer by layer."""
    recorders = []
    for layer in model.model.layers:
        attn = layer.self_attn
        if not isinstance(attn.mechanism, Recorder):
            attn.mechanism = Recorder(attn.mechanism)
        recorders.append(attn.mechanism)
    return recorders


def run_layers(model, ids):
    """The decoder without its final norm and LM head: enough to fill the recorders."""
    return model.hidden(ids)


# ---- calibration statistics and dark's initial M ----

def second_moments(recorders, scale, moments=None):
    """Adds this batch's uncentered second moments of x' = sqrt(scale) x (the vectors dark's features
    see, after RoPE) per layer and kv head: the queries of the kv head's group and its keys, pooled.
    moments: list per layer of [sum xx^T [Hkv, d, d], count]."""
    if moments is None:
        moments = [None] * len(recorders)
    for i, r in enumerate(recorders):
        q, k = r.q.double() * math.sqrt(scale), r.k.double() * math.sqrt(scale)
        kv, d = k.shape[1], k.shape[-1]
        group = q.shape[1] // kv
        qg = q.reshape(q.shape[0], kv, group, q.shape[2], d).transpose(1, 2).reshape(-1, kv, q.shape[2], d)
        s = torch.einsum("bhtd,bhte->hde", qg, qg) / group + torch.einsum("bhtd,bhte->hde", k, k)
        n = k.shape[0] * k.shape[2]
        if moments[i] is None:
            moments[i] = [s, n]
        else:
            moments[i][0] += s
            moments[i][1] += n
    return moments


def dark_init(second_moment, how, clip=0.4):
    """dark's M [Hkv, d, d] from Lambda = E[x' x'^T] / 2 (queries and keys pooled) [Hkv, d, d]:
      identity  M = I (performer's, the control)
      proposal  Sigma = (I + 2 Lambda)(I - 2 Lambda)^-1, DARKFormer's variance-optimal proposal for
                N(0, Lambda) queries and keys (its Theorem 3.2), eigenvalues of Lambda clipped to `clip`
                (< 1/2, where Sigma stops being a covariance); M = Sigma^1/2
      whiten    Sigma = Lambda^-1 scaled to keep tr(Sigma Lambda) = tr(Lambda) (its Section 4.1's
                Mahalanobis geometry at the input's own scale); M = Sigma^1/2
    Returns M and a dict of diagnostics (Lambda's eigenvalues)."""
    lam = second_moment.double()
    kv, d, _ = lam.shape
    evals, evecs = torch.linalg.eigh(lam)
    evals = evals.clamp_min(0)
    info = {"lambda_eigenvalues": [[round(x, 5) for x in e.tolist()] for e in evals]}
    if how == "identity":
        return torch.eye(d, dtype=torch.float64).expand(kv, d, d).clone(), info
    if how == "proposal":
        e = evals.clamp_max(clip)
        sigma = (1 + 2 * e) / (1 - 2 * e)
        info["clipped"] = int((evals > clip).sum().item())
    elif how == "whiten":
        floor = 1e-3 * evals.mean(-1, keepdim=True)
        sigma = 1.0 / (evals + floor)
        sigma = sigma * (evals.sum(-1, keepdim=True) / (sigma * evals).sum(-1, keepdim=True))
    else:
        raise ValueError("dark init %r: expected identity, proposal or whiten" % how)
    info["sigma_eigenvalues"] = [[round(x, 4) for x in s.tolist()] for s in sigma]
    M = evecs @ torch.diag_embed(sigma.sqrt()) @ evecs.transpose(-1, -2)
    return M, info


# ---- stage 1: attention transfer ----

def transfer_loss(student, recorders):
    """Sum over layers of the mean squared error between the student's attention output (its mechanism
    on the teacher's q, k, v, through o_proj) and the teacher's; also each layer's error relative to
    the teacher output's mean square."""
    total, relative = 0.0, []
    for layer, r in zip(student.model.layers, recorders):
        attn = layer.self_attn
        b, h, t, d = r.q.shape
        y_student = attn.mechanism(r.q, r.k, r.v)
        to_hidden = lambda y: attn.o_proj(y.transpose(1, 2).reshape(b, t, h * d))
        target = to_hidden(r.y).detach()
        err = F.mse_loss(to_hidden(y_student), target)
        total = total + err
        relative.append(err.item() / max(target.square().mean().item(), 1e-30))
    return total, relative


def mechanism_parameters(model):
    """The trainable parameters of the layers' mechanisms (dark's M, window_dark's M and gate, lfk's G)."""
    out = []
    for layer in model.model.layers:
        tensors = layer.self_attn.mechanism.tensors
        if tensors is not None:
            out.extend(p for p in tensors.parameters() if p.requires_grad)
    return out


def clamp_gates(model):
    """window_dark's gates stay >= 0 (the engine refuses a negative one)."""
    with torch.no_grad():
        for layer in model.model.layers:
            gate = getattr(layer.self_attn.mechanism.tensors, "gate", None)
            if gate is not None:
                gate.clamp_(min=0)


# ---- stage 2: low-rank adapters ----

class LowRank(nn.Module):
    """weight -> weight + (alpha / r) B A, a parametrization (the module keeps its tensor names; the
    product merges back into the weight at export). A starts small and random, B at zero."""

    def __init__(self, out_features, in_features, rank, alpha, generator):
        super().__init__()
        self.A = nn.Parameter(torch.randn(rank, in_features, generator=generator) / math.sqrt(in_features))
        self.B = nn.Parameter(torch.zeros(out_features, rank))
        self.scale = alpha / rank

    def forward(self, weight):
        return weight + self.scale * (self.B @ self.A).to(weight.dtype)


LORA_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
LORA_MLP = ("gate_proj", "up_proj", "down_proj")


def add_low_rank(model, rank, alpha, targets, seed):
    """Freezes every weight and adds adapters to the named linear layers of every decoder layer.
    Returns the adapters' parameters."""
    for p in model.parameters():
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    params = []
    for layer in model.model.layers:
        for name in targets:
            module = getattr(layer.self_attn, name, None) or getattr(layer.mlp, name)
            adapter = LowRank(module.weight.shape[0], module.weight.shape[1], rank, alpha, g)
            parametrize.register_parametrization(module, "weight", adapter)
            params.extend(adapter.parameters())
    return params


def merge_low_rank(model):
    """Folds every adapter into its weight (the plain checkpoint tensors again)."""
    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)


# ---- evaluation ----

def evaluate(model, batches):
    """Mean loss (nats/token) and next-token accuracy over the batches."""
    model.eval()
    total, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in batches:
            logits = model(x).float()
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
            count += y.numel()
    model.train()
    return total / max(count, 1), correct / max(count, 1)


def distill_loss(student_logits, teacher_logits, temperature):
    """KL(teacher || student) at a temperature, times T^2 (Hinton's scaling), per token."""
    t = temperature
    log_p = F.log_softmax(student_logits.float() / t, dim=-1)
    q = F.softmax(teacher_logits.float() / t, dim=-1)
    return F.kl_div(log_p.reshape(-1, log_p.shape[-1]), q.reshape(-1, q.shape[-1]), reduction="batchmean") * t * t
