"""Kimi K3 on numpy (autograd.py), written to match this engine (src/model/k3.ts, kda.ts, mla.ts,
moe.ts, attnres.ts, router.ts, ops.ts; spec: shared/spec/K3.md §6, ARCHITECTURE.md §4): a second
implementation used to train the demo model and to check the engine's logits.

Weights live in a flat dict keyed by the checkpoint's own tensor names (language_model. ...). The
forward applies the storage rounding as straight-through estimates: BF16 tensors are rounded to
bfloat16 and expert matrices are quantized to MXFP4 (E2M1 values, one E8M0 scale per 32 inputs)
on the way in, so the model that trains is the model that is stored. KDA runs in chunks (the
delta rule's WY form) so that a whole sequence is a few batched products, not a loop per token.
"""

import json
import math
import struct

import numpy as np

import autograd as ag
from autograd import Var

PFX = 'language_model.'
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)
E2M1_MID = (E2M1[1:] + E2M1[:-1]) / 2
KDA_CHUNK = 8  # cumulative log decay within a chunk stays >= 8 * gate_lower_bound (no overflow)


# ---------------------------------------------------------------- storage formats

def bf16_bits(x):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_round(x):
    r = (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
    return r.astype(x.dtype, copy=False)


def mxfp4_codes(w):
    """[rows, cols] -> (nibble codes [rows, cols] uint8, scale bytes [rows, cols/32] uint8).
    Scale = 2^(floor(log2(amax)) - 2) per group (OCP MX: emax of E2M1 is 2); values rounded to the
    nearest E2M1 magnitude (a tie takes the smaller), clamped at 6."""
    rows, cols = w.shape
    g = w.astype(np.float64).reshape(rows, cols // 32, 32)
    amax = np.abs(g).max(-1)
    with np.errstate(divide='ignore'):
        e = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-30))) - 2, -127)
    e = np.clip(e, -127, 127)
    x = np.clip(g / np.exp2(e)[..., None], -6, 6)
    idx = np.searchsorted(E2M1_MID, np.abs(x), side='left')
    nib = idx + 8 * ((x < 0) & (idx > 0))
    return nib.reshape(rows, cols).astype(np.uint8), (e + 127).astype(np.uint8)


def mxfp4_decode(nib, scale):
    rows, cols = nib.shape
    table = np.concatenate([E2M1, -E2M1])
    v = table[nib.astype(np.int64)].reshape(rows, cols // 32, 32)
    s = np.where(scale == 255, 0.0, np.exp2(scale.astype(np.float32) - 127)).astype(np.float32)
    return (v * s[..., None]).reshape(rows, cols)


def mxfp4_round(w):
    return mxfp4_decode(*mxfp4_codes(w)).astype(w.dtype)


# ---------------------------------------------------------------- safetensors

NP_DT = {'F32': np.float32, 'U8': np.uint8, 'F16': np.float16, 'BF16': np.uint16}


def read_safetensors(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        a, b = info['data_offsets']
        t = np.frombuffer(data[a:b], NP_DT[info['dtype']]).reshape(info['shape'])
        out[name] = (info['dtype'], t)
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, numpy array of the stored bits), written in sorted name order."""
    header, blobs, off = {'__metadata__': {'format': 'pt'}}, [], 0
    for name in sorted(tensors):
        dt, t = tensors[name]
        raw = np.ascontiguousarray(t).tobytes()
        header[name] = {'dtype': dt, 'shape': list(t.shape), 'data_offsets': [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------- config

class Cfg:
    def __init__(self, config):
        t = config['text_config']
        la = t['linear_attn_config']
        self.D = t['hidden_size']
        self.V = t['vocab_size']
        self.L = t['num_hidden_layers']
        self.eps = t['rms_norm_eps']
        self.mla_layers = {i - 1 for i in la['full_attn_layers']}  # config is 1-based
        self.first_dense = t['first_k_dense_replace']
        self.block = t['attn_res_block_size']
        self.H = t['num_attention_heads']
        self.dn, self.dr, self.dv = t['qk_nope_head_dim'], t['qk_rope_head_dim'], t['v_head_dim']
        self.Lk = t['kv_lora_rank']
        self.lat_eps = 1e-6  # MLA latent norms (src/checkpoint/config.ts)
        self.kH, self.kd, self.W = la['num_heads'], la['head_dim'], la['short_conv_kernel_size']
        self.lam = la['gate_lower_bound']
        self.E, self.topk = t['num_experts'], t['num_experts_per_token']
        self.renorm, self.scaling = t['moe_renormalize'], t['routed_scaling_factor']
        self.beta, self.beta_l = t['activation_situ_beta'], t.get('activation_situ_linear_beta')


# ---------------------------------------------------------------- the forward pass

def situ(a, u, c):
    # SiTU (K3.md §6.5): [β·tanh(a/β)·σ(a)] · [βl·tanh(u/βl)]; σ takes the uncapped gate.
    g = ag.tanh(a * (1.0 / c.beta)) * ag.sigmoid(a) * c.beta
    return g * (ag.tanh(u * (1.0 / c.beta_l)) * c.beta_l if c.beta_l is not None else u)


def kda_chunked(q, k, v, glog, beta):
    """The KDA recurrence over whole chunks. q, k, v, glog (log of the per-channel decay α)
    [N, H, T, d], beta [N, H, T]; T a multiple of KDA_CHUNK. Per token the engine does
      S = α ⊙ S;  S += β k (v - kᵀS)ᵀ;  o = qᵀ S
    (S rows: key channels). Within a chunk with cumulative decay γ_t = exp(G_t), the state's
    updates δ solve (I + β·tril(K̃ K̂ᵀ, -1)) Δ = β (V - K̃ S₀), K̃ = K⊙γ, K̂ = K/γ; then
    O = Q̃ S₀ + tril(Q̃ K̂ᵀ) Δ and S₁ = γ_C ⊙ S₀ + (K⊙γ_C/γ)ᵀ Δ."""
    N, H, T, d = q.shape
    C = KDA_CHUNK
    n = T // C
    dt = q.v.dtype

    def chunks(x):
        return ag.reshape(x, (N, H, n, C) + x.shape[3:])
    q, k, v, glog, beta = map(chunks, (q, k, v, glog, beta))
    tri = np.tril(np.ones((C, C), dt), -1)
    tri0 = np.tril(np.ones((C, C), dt))
    G = ag.matmul(tri0, glog)  # inclusive cumulative sum within the chunk [N, H, n, C, d]
    eg, eng = ag.exp(G), ag.exp(-G)
    kt, kh, qt = k * eg, k * eng, q * eg
    gl = G[:, :, :, C - 1:C, :]  # [N, H, n, 1, d]
    kend = k * ag.exp(gl - G)
    khT = ag.transpose(kh, (0, 1, 2, 4, 3))
    b = ag.reshape(beta, (N, H, n, C, 1))
    M = ag.matmul(kt, khT) * tri * b + np.eye(C, dtype=dt)
    U = ag.solve(M, v * b)
    Wm = ag.solve(M, kt * b)
    P = ag.matmul(qt, khT) * tri0
    decay = ag.transpose(ag.exp(gl), (0, 1, 2, 4, 3))  # [N, H, n, d, 1]: scales the state's rows
    kendT = ag.transpose(kend, (0, 1, 2, 4, 3))
    U, Wm, qt, P, decay, kendT = (ag.unstack(x, 2) for x in (U, Wm, qt, P, decay, kendT))
    S = Var(np.zeros((N, H, d, v.shape[-1]), dt))
    outs = []
    for c in range(n):
        delta = U[c] - ag.matmul(Wm[c], S)
        outs.append(ag.matmul(qt[c], S) + ag.matmul(P[c], delta))
        S = S * decay[c] + ag.matmul(kendT[c], delta)
    return ag.concat(outs, 2)  # [N, H, T, dv]


class K3:
    """Forward over a dict of named arrays; params() gives the Vars that train."""

    def __init__(self, cfg, params, dtypes):
        self.c = cfg
        self.p = params  # name -> np array (float32, or float64 to check gradients)
        self.dtypes = dtypes  # name -> stored dtype ('BF16', 'F32', 'MXFP4')
        self.vars = {}

    def begin(self, train):
        """Fresh Vars for one forward (gradients land in .g of each)."""
        self.vars = {n: Var(t, req=train) for n, t in self.p.items()}

    def w(self, name):
        t = self.vars[PFX + name]
        d = self.dtypes[PFX + name]
        if d == 'BF16':
            return ag.ste(t, bf16_round)
        if d == 'MXFP4':
            return ag.ste(t, mxfp4_round)
        return t

    def has(self, name):
        return PFX + name in self.p

    def lin(self, name, x):
        return ag.linear(x, self.w(name + '.weight'))

    # Attention Residuals (attnres.ts): softmax over depth of RMS-normalized keys · fold.
    def mix(self, B, cur, norm, proj):
        fold = self.w(norm + '.weight') * ag.reshape(self.w(proj + '.weight'), (-1,))
        cands = ag.stack(B + [cur], 0)  # [m, N, T, D]
        score = ag.sum_(ag.rmsnorm(cands, fold, self.c.eps), -1)  # [m, N, T]
        pi = ag.softmax(score, 0)
        return ag.sum_(ag.reshape(pi, pi.shape + (1,)) * cands, 0)

    def mlp(self, pre, x):
        return self.lin(pre + 'down_proj', situ(self.lin(pre + 'gate_proj', x), self.lin(pre + 'up_proj', x), self.c))

    def kda(self, pre, x):
        c = self.c
        N, T, _ = x.shape
        H, d, W = c.kH, c.kd, c.W
        P = H * d
        Tp = -(-T // KDA_CHUNK) * KDA_CHUNK

        def conv(name, u):  # causal depthwise conv, tap W-1 on the current token, then SiLU
            taps = ag.reshape(self.w(name + '.weight'), (P, W))
            up = ag.concat([Var(np.zeros((N, W - 1, P), u.v.dtype)), u], 1)
            acc = None
            for m in range(W):
                term = up[:, m:m + T, :] * ag.reshape(taps[:, m], (P,))
                acc = term if acc is None else acc + term
            return ag.silu(acc)

        def heads(u):  # [N, T, P] -> [N, H, Tp, d], zero rows after T (no effect on earlier tokens)
            u = ag.transpose(ag.reshape(u, (N, T, H, d)), (0, 2, 1, 3))
            if Tp > T:
                u = ag.concat([u, Var(np.zeros((N, H, Tp - T, d), u.v.dtype))], 2)
            return u

        q = conv(pre + 'q_conv1d', self.lin(pre + 'q_proj', x))
        k = conv(pre + 'k_conv1d', self.lin(pre + 'k_proj', x))
        v = conv(pre + 'v_conv1d', self.lin(pre + 'v_proj', x))
        q, k, v = heads(q), heads(k), heads(v)
        q = q * ag.rsqrt(ag.sum_(ag.square(q), -1, True) + 1e-6) * (1 / math.sqrt(d))
        k = k * ag.rsqrt(ag.sum_(ag.square(k), -1, True) + 1e-6)
        z = self.lin(pre + 'f_b_proj', self.lin(pre + 'f_a_proj', x)) + self.w(pre + 'dt_bias')
        A = ag.exp(self.w(pre + 'A_log')[:H])  # per head, repeated over its channels
        z = ag.reshape(z, (N, T, H, d)) * ag.reshape(A, (H, 1))
        glog = heads(ag.reshape(ag.sigmoid(z) * c.lam, (N, T, P)))  # log α: bounded gate (§4.3)
        beta = ag.transpose(ag.sigmoid(self.lin(pre + 'b_proj', x)), (0, 2, 1))  # [N, H, T]
        if Tp > T:
            beta = ag.concat([beta, Var(np.zeros((N, H, Tp - T), beta.v.dtype))], 2)
        o = kda_chunked(q, k, v, glog, beta)[:, :, :T]
        o = ag.transpose(o, (0, 2, 1, 3))  # [N, T, H, d]
        gamma = ag.reshape(self.lin(pre + 'g_proj', x), (N, T, H, d))
        o = ag.rmsnorm(o, self.w(pre + 'o_norm.weight'), c.eps) * ag.sigmoid(gamma)
        return self.lin(pre + 'o_proj', ag.reshape(o, (N, T, P)))

    def mla(self, pre, x):
        c = self.c
        N, T, _ = x.shape
        H, dn, dr, dv, Lk = c.H, c.dn, c.dr, c.dv, c.Lk
        qa = ag.rmsnorm(self.lin(pre + 'q_a_proj', x), self.w(pre + 'q_a_layernorm.weight'), c.lat_eps)
        q = ag.transpose(ag.reshape(self.lin(pre + 'q_b_proj', qa), (N, T, H, dn + dr)), (0, 2, 1, 3))
        a = self.lin(pre + 'kv_a_proj_with_mqa', x)
        lat = ag.rmsnorm(a[..., :Lk], self.w(pre + 'kv_a_layernorm.weight'), c.lat_eps)  # [N, T, Lk]
        kr = ag.reshape(a[..., Lk:], (N, 1, T, dr))  # NoPE: the rope part is used unrotated
        kvb = ag.reshape(self.w(pre + 'kv_b_proj.weight'), (H, dn + dv, Lk))
        lat4 = ag.reshape(lat, (N, 1, T, Lk))
        kn = ag.matmul(lat4, ag.transpose(kvb[:, :dn], (0, 2, 1)))  # [N, H, T, dn]
        vv = ag.matmul(lat4, ag.transpose(kvb[:, dn:], (0, 2, 1)))  # [N, H, T, dv]
        s = ag.matmul(q[..., :dn], ag.transpose(kn, (0, 1, 3, 2))) + ag.matmul(q[..., dn:], ag.transpose(kr, (0, 1, 3, 2)))
        mask = np.triu(np.full((T, T), -1e30, x.v.dtype), 1)
        pr = ag.softmax(s * (1 / math.sqrt(dn + dr)) + mask, -1)
        o = ag.reshape(ag.transpose(ag.matmul(pr, vv), (0, 2, 1, 3)), (N, T, H * dv))
        o = o * ag.sigmoid(self.lin(pre + 'g_proj', x))
        return self.lin(pre + 'o_proj', o)

    def moe(self, pre, x):
        c = self.c
        N, T, D = x.shape
        R = N * T
        xf = ag.reshape(x, (R, D))
        s = ag.sigmoid(self.lin(pre + 'gate', xf))  # [R, E]
        pick = s.v + self.w(pre + 'gate.e_score_correction_bias').v
        sel = np.argsort(-pick, -1, kind='stable')[:, :c.topk]
        chosen = np.zeros(pick.shape, s.v.dtype)
        np.put_along_axis(chosen, sel, 1, -1)
        wts = s * chosen
        if c.renorm and c.topk > 1:
            wts = wts * ag.recip(ag.sum_(wts, -1, True) + 1e-20)
        wts = wts * c.scaling
        zl = self.lin(pre + 'routed_expert_down_proj', xf)
        routed = None
        for e in range(c.E):
            tok = np.nonzero(chosen[:, e])[0]  # only the tokens that chose e
            if tok.size == 0:
                continue
            ep = f'{pre}experts.{e}.'
            ze = ag.take_rows(zl, tok, unique=True)
            y = self.lin(ep + 'w2', situ(self.lin(ep + 'w1', ze), self.lin(ep + 'w3', ze), c))
            we = ag.take_rows(ag.reshape(wts[:, e], (R, 1)), tok, unique=True)
            part = ag.scatter_rows(R, tok, y * we)
            routed = part if routed is None else routed + part
        if self.has(pre + 'routed_expert_norm.weight'):
            routed = ag.rmsnorm(routed, self.w(pre + 'routed_expert_norm.weight'), c.eps)
        out = self.lin(pre + 'routed_expert_up_proj', routed)
        if self.has(pre + 'shared_experts.gate_proj.weight'):
            out = out + self.mlp(pre + 'shared_experts.', xf)
        return ag.reshape(out, (N, T, D))

    def forward(self, ids, train=False, rows=None):
        """ids [N, T] int -> logits Var [N, T, V] (k3.ts forwardK3); with rows (indices into the
        N*T positions), only those positions' logits [len(rows), V]: the loss needs few of them."""
        self.begin(train)
        c = self.c
        m = 'model.'
        p = ag.take_rows(self.w(m + 'embed_tokens.weight'), ids)
        B = []
        for li in range(c.L):
            lp = f'{m}layers.{li}.'
            prefix = p
            h = self.mix(B, prefix, lp + 'self_attention_res_norm', lp + 'self_attention_res_proj') if B else prefix
            if li % c.block == 0:
                B.append(prefix)
                prefix = None
            xn = ag.rmsnorm(h, self.w(lp + 'input_layernorm.weight'), c.eps)
            a = self.mla(lp + 'self_attn.', xn) if li in c.mla_layers else self.kda(lp + 'self_attn.', xn)
            prefix = a if prefix is None else prefix + a
            h2 = self.mix(B, prefix, lp + 'mlp_res_norm', lp + 'mlp_res_proj')
            xn2 = ag.rmsnorm(h2, self.w(lp + 'post_attention_layernorm.weight'), c.eps)
            f = self.mlp(lp + 'mlp.', xn2) if li < c.first_dense else self.moe(lp + 'block_sparse_moe.', xn2)
            p = prefix + f
        hL = self.mix(B, p, m + 'output_attn_res_norm', m + 'output_attn_res_proj')
        if rows is not None:
            hL = ag.take_rows(ag.reshape(hL, (-1, c.D)), rows, unique=True)
        return self.lin('lm_head', ag.rmsnorm(hL, self.w(m + 'norm.weight'), c.eps))


# ---------------------------------------------------------------- checkpoint <-> parameters

def load_checkpoint(d, dtype=np.float32):
    """A single-file K3 checkpoint -> (config, Cfg, params name -> array, dtypes, the other tensors)."""
    config = json.load(open(f'{d}/config.json'))
    ts = read_safetensors(f'{d}/model.safetensors')
    params, dtypes, other = {}, {}, {}
    for name, (dt, t) in ts.items():
        if not name.startswith(PFX):
            other[name] = (dt, t)
        elif name.endswith('.weight_packed'):
            base = name[:-len('_packed')]
            sc = ts[base + '_scale'][1]
            nib = np.stack([t & 15, t >> 4], -1).reshape(t.shape[0], t.shape[1] * 2)
            params[base] = mxfp4_decode(nib, sc).astype(dtype)
            dtypes[base] = 'MXFP4'
        elif name.endswith('.weight_scale'):
            continue
        elif dt == 'BF16':
            params[name] = (t.astype(np.uint32) << 16).view(np.float32).astype(dtype)
            dtypes[name] = 'BF16'
        else:
            params[name] = t.astype(dtype)
            dtypes[name] = dt
    return config, Cfg(config), params, dtypes, other


def stored_tensors(params, dtypes, other):
    """Parameters in their stored formats (what load_checkpoint reads back exactly)."""
    out = dict(other)
    for name, t in params.items():
        if dtypes[name] == 'MXFP4':
            nib, sc = mxfp4_codes(t)
            n = nib.reshape(t.shape[0], -1, 2)
            out[name + '_packed'] = ('U8', (n[..., 0] | (n[..., 1] << 4)).astype(np.uint8))
            out[name + '_scale'] = ('U8', sc)
        elif dtypes[name] == 'BF16':
            out[name] = ('BF16', bf16_bits(t))
        else:
            out[name] = ('F32', t.astype(np.float32))
    return out
