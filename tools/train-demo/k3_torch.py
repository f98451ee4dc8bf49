"""Kimi K3 in PyTorch, written to match this engine (src/model/k3.ts, kda.ts, mla.ts, moe.ts,
attnres.ts, router.ts, ops.ts; spec: shared/spec/K3.md §6, ARCHITECTURE.md §4): a second
implementation used to train the demo model and to check the engine's logits.

Weights live in a flat dict keyed by the checkpoint's own tensor names (language_model. ...), as
float32 parameters. The forward applies the storage rounding as straight-through estimates:
BF16 tensors are rounded to bfloat16 and expert matrices are quantized to MXFP4 (E2M1 values,
one E8M0 scale per 32 inputs) on the way in, so the model that trains is the model that is stored.
"""

import json
import math
import struct

import torch
import torch.nn.functional as F

PFX = 'language_model.'
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_MID = (E2M1[1:] + E2M1[:-1]) / 2


# ---------------------------------------------------------------- storage formats

def mxfp4_codes(w):
    """[rows, cols] -> (nibble codes [rows, cols] uint8, scale bytes [rows, cols/32] uint8).
    Scale = 2^(floor(log2(amax)) - 2) per group (OCP MX: emax of E2M1 is 2); values rounded to the
    nearest E2M1 magnitude, clamped at 6."""
    rows, cols = w.shape
    g = w.detach().float().reshape(rows, cols // 32, 32)
    amax = g.abs().amax(-1)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp_min(1e-30))) - 2, torch.full_like(amax, -127))
    e = e.clamp(-127, 127)
    x = (g / torch.exp2(e)[..., None]).clamp(-6, 6)
    idx = torch.bucketize(x.abs(), E2M1_MID)  # nearest magnitude (ties go up)
    nib = idx + 8 * ((x < 0) & (idx > 0)).long()
    return nib.reshape(rows, cols).to(torch.uint8), (e + 127).to(torch.uint8)


def mxfp4_decode(nib, scale):
    rows, cols = nib.shape
    table = torch.cat([E2M1, -E2M1])
    v = table[nib.long()].reshape(rows, cols // 32, 32)
    s = torch.where(scale == 255, torch.zeros(()), torch.exp2(scale.float() - 127))
    return (v * s[..., None]).reshape(rows, cols)


def mxfp4_ste(w):
    nib, sc = mxfp4_codes(w)
    return w + (mxfp4_decode(nib, sc) - w).detach()


def bf16_ste(w):
    return w + (w.to(torch.bfloat16).float() - w).detach()


# ---------------------------------------------------------------- safetensors

DT = {'BF16': torch.bfloat16, 'F32': torch.float32, 'U8': torch.uint8, 'F16': torch.float16}
DT_NAME = {v: k for k, v in DT.items()}


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
        buf = bytearray(data[a:b])
        t = torch.frombuffer(buf, dtype=DT[info['dtype']]) if b > a else torch.empty(0, dtype=DT[info['dtype']])
        out[name] = t.reshape(info['shape'])
    return header, out


def write_safetensors(path, tensors):
    """tensors: name -> tensor (bf16 / f32 / u8), written in sorted name order."""
    header, blobs, off = {'__metadata__': {'format': 'pt'}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b''
        header[name] = {'dtype': DT_NAME[t.dtype], 'shape': list(t.shape), 'data_offsets': [off, off + len(raw)]}
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

def rms(x, w, eps):
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * (x * r)


def situ(a, u, c):
    # SiTU (K3.md §6.5): [β·tanh(a/β)·σ(a)] · [βl·tanh(u/βl)]; σ takes the uncapped gate.
    g = c.beta * torch.tanh(a / c.beta) * torch.sigmoid(a)
    return g * (c.beta_l * torch.tanh(u / c.beta_l) if c.beta_l is not None else u)


class K3:
    """Forward over a dict of named f32 tensors (parameters or plain)."""

    def __init__(self, cfg, params, dtypes):
        self.c = cfg
        self.p = params
        self.dtypes = dtypes  # name -> stored dtype ('BF16', 'F32', 'MXFP4')

    def w(self, name):
        t = self.p[PFX + name]
        d = self.dtypes[PFX + name]
        if d == 'BF16':
            return bf16_ste(t)
        if d == 'MXFP4':
            return mxfp4_ste(t)
        return t

    def lin(self, name, x):
        return x @ self.w(name + '.weight').t()

    # Attention Residuals (attnres.ts): softmax over depth of RMS-normalized keys · fold.
    def mix(self, B, cur, norm, proj):
        fold = self.w(norm + '.weight') * self.w(proj + '.weight')[0]
        cands = torch.stack(B + [cur], 0)  # [m, N, T, D]
        r = torch.rsqrt(cands.pow(2).mean(-1, keepdim=True) + self.c.eps)
        score = ((cands * r) * fold).sum(-1)  # [m, N, T]
        pi = torch.softmax(score, 0)
        return (pi[..., None] * cands).sum(0)

    def mlp(self, pre, x):
        return self.lin(pre + 'down_proj', situ(self.lin(pre + 'gate_proj', x), self.lin(pre + 'up_proj', x), self.c))

    def kda(self, pre, x):
        c = self.c
        N, T, _ = x.shape
        H, d, W = c.kH, c.kd, c.W
        P = H * d

        def conv(name, v):  # causal depthwise conv, tap W-1 on the current token, then SiLU
            taps = self.w(name + '.weight').reshape(P, W)
            vp = F.pad(v, (0, 0, W - 1, 0))
            u = sum(vp[:, m:m + T, :] * taps[:, m] for m in range(W))
            return F.silu(u)

        q = conv(pre + 'q_conv1d', self.lin(pre + 'q_proj', x)).reshape(N, T, H, d)
        k = conv(pre + 'k_conv1d', self.lin(pre + 'k_proj', x)).reshape(N, T, H, d)
        v = conv(pre + 'v_conv1d', self.lin(pre + 'v_proj', x)).reshape(N, T, H, d)
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) / math.sqrt(d)
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        z = self.lin(pre + 'f_b_proj', self.lin(pre + 'f_a_proj', x)) + self.w(pre + 'dt_bias')
        A = torch.exp(self.w(pre + 'A_log')[:H]).repeat_interleave(d)
        alpha = torch.exp(c.lam * torch.sigmoid(A * z)).reshape(N, T, H, d)  # bounded gate (§4.3)
        beta = torch.sigmoid(self.lin(pre + 'b_proj', x))  # [N, T, H]
        S = x.new_zeros(N, H, d, d)  # rows: key channel, columns: value channel
        outs = []
        for t in range(T):
            S = S * alpha[:, t, :, :, None]
            kt = k[:, t]
            u = torch.einsum('nhi,nhij->nhj', kt, S)
            S = S + torch.einsum('nhi,nhj->nhij', kt * beta[:, t, :, None], v[:, t] - u)
            outs.append(torch.einsum('nhi,nhij->nhj', q[:, t], S))
        o = torch.stack(outs, 1)  # [N, T, H, d]
        gamma = self.lin(pre + 'g_proj', x).reshape(N, T, H, d)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c.eps) * self.w(pre + 'o_norm.weight') * torch.sigmoid(gamma)
        return self.lin(pre + 'o_proj', o.reshape(N, T, P))

    def mla(self, pre, x):
        c = self.c
        N, T, _ = x.shape
        H, dn, dr, dv, Lk = c.H, c.dn, c.dr, c.dv, c.Lk
        qa = rms(self.lin(pre + 'q_a_proj', x), self.w(pre + 'q_a_layernorm.weight'), c.lat_eps)
        q = self.lin(pre + 'q_b_proj', qa).reshape(N, T, H, dn + dr)
        a = self.lin(pre + 'kv_a_proj_with_mqa', x)
        lat = rms(a[..., :Lk], self.w(pre + 'kv_a_layernorm.weight'), c.lat_eps)  # [N, T, Lk]
        kr = a[..., Lk:]  # NoPE: the rope part is used unrotated
        kvb = self.w(pre + 'kv_b_proj.weight').reshape(H, dn + dv, Lk)
        uk, uv = kvb[:, :dn], kvb[:, dn:]
        qlat = torch.einsum('nthe,hel->nthl', q[..., :dn], uk)
        s = torch.einsum('nthl,nsl->nhts', qlat, lat) + torch.einsum('nthe,nse->nhts', q[..., dn:], kr)
        s = s / math.sqrt(dn + dr)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        pr = torch.softmax(s.masked_fill(mask, float('-inf')), -1)
        olat = torch.einsum('nhts,nsl->nthl', pr, lat)
        o = torch.einsum('nthl,hel->nthe', olat, uv).reshape(N, T, H * dv)
        o = o * torch.sigmoid(self.lin(pre + 'g_proj', x))
        return self.lin(pre + 'o_proj', o)

    def moe(self, pre, x):
        c = self.c
        logits = self.lin(pre + 'gate', x)
        s = torch.sigmoid(logits)
        sel = torch.topk((s + self.w(pre + 'gate.e_score_correction_bias')).detach(), c.topk, -1).indices
        wts = torch.gather(s, -1, sel)
        if c.renorm and c.topk > 1:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        wts = wts * c.scaling
        zl = self.lin(pre + 'routed_expert_down_proj', x)
        shape = zl.shape
        zf, self_sel, wf = zl.reshape(-1, shape[-1]), sel.reshape(-1, c.topk), wts.reshape(-1, c.topk)
        routed = torch.zeros_like(zf)
        for e in range(c.E):
            tok, slot = (self_sel == e).nonzero(as_tuple=True)  # only the tokens that chose e
            if tok.numel() == 0:
                continue
            ep = f'{pre}experts.{e}.'
            ze = zf[tok]
            y = self.lin(ep + 'w2', situ(self.lin(ep + 'w1', ze), self.lin(ep + 'w3', ze), c))
            routed = routed.index_add(0, tok, wf[tok, slot, None] * y)
        routed = routed.reshape(shape)
        if PFX + pre + 'routed_expert_norm.weight' in self.p:
            routed = rms(routed, self.w(pre + 'routed_expert_norm.weight'), c.eps)
        out = self.lin(pre + 'routed_expert_up_proj', routed)
        if PFX + pre + 'shared_experts.gate_proj.weight' in self.p:
            out = out + self.mlp(pre + 'shared_experts.', x)
        return out

    def forward(self, ids):
        """ids [N, T] long -> logits [N, T, V] (k3.ts forwardK3)."""
        c = self.c
        m = 'model.'
        p = self.w(m + 'embed_tokens.weight')[ids]
        B = []
        for l in range(c.L):
            lp = f'{m}layers.{l}.'
            prefix = p
            h = self.mix(B, prefix, lp + 'self_attention_res_norm', lp + 'self_attention_res_proj') if B else prefix
            if l % c.block == 0:
                B.append(prefix)
                prefix = None
            xn = rms(h, self.w(lp + 'input_layernorm.weight'), c.eps)
            a = self.mla(lp + 'self_attn.', xn) if l in c.mla_layers else self.kda(lp + 'self_attn.', xn)
            prefix = a if prefix is None else prefix + a
            h2 = self.mix(B, prefix, lp + 'mlp_res_norm', lp + 'mlp_res_proj')
            xn2 = rms(h2, self.w(lp + 'post_attention_layernorm.weight'), c.eps)
            f = self.mlp(lp + 'mlp.', xn2) if l < c.first_dense else self.moe(lp + 'block_sparse_moe.', xn2)
            p = prefix + f
        hL = self.mix(B, p, m + 'output_attn_res_norm', m + 'output_attn_res_proj')
        return self.lin('lm_head', rms(hL, self.w(m + 'norm.weight'), c.eps))


# ---------------------------------------------------------------- checkpoint <-> parameters

def load_checkpoint(d):
    """A single-file K3 checkpoint -> (Cfg, params name -> f32 tensor, dtypes, the other tensors)."""
    config = json.load(open(f'{d}/config.json'))
    _, ts = read_safetensors(f'{d}/model.safetensors')
    params, dtypes, other = {}, {}, {}
    for name, t in ts.items():
        if not name.startswith(PFX):
            other[name] = t
        elif name.endswith('.weight_packed'):
            base = name[:-len('_packed')]
            sc = ts[base + '_scale']
            b = t.to(torch.int64)
            nib = torch.stack([b & 15, b >> 4], -1).reshape(t.shape[0], t.shape[1] * 2)
            params[base] = mxfp4_decode(nib, sc)
            dtypes[base] = 'MXFP4'
        elif name.endswith('.weight_scale'):
            continue
        else:
            params[name] = t.float()
            dtypes[name] = 'BF16' if t.dtype == torch.bfloat16 else 'F32'
    return config, Cfg(config), params, dtypes, other


def stored_tensors(params, dtypes, other):
    """Parameters in their stored formats (what load_checkpoint reads back exactly)."""
    out = dict(other)
    for name, t in params.items():
        t = t.detach()
        if dtypes[name] == 'MXFP4':
            nib, sc = mxfp4_codes(t)
            n = nib.reshape(t.shape[0], -1, 2).to(torch.int64)
            out[name + '_packed'] = (n[..., 0] | (n[..., 1] << 4)).to(torch.uint8)
            out[name + '_scale'] = sc
        elif dtypes[name] == 'BF16':
            out[name] = t.to(torch.bfloat16)
        else:
            out[name] = t.float()
    return out
