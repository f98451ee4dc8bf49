"""Train the demo K3's DSpark drafter (docs/DEMO-DRAFTER.md): a RadixArk-layout block drafter (DFlash-style
config, Qwen3 GQA layers, K3's embedding and lm_head borrowed, Markov and confidence heads), on numpy.

  node tools/train-dspark/dump.mjs --config tools/train-dspark/config        (taps + greedy continuations)
  python3 tools/train-dspark/train.py --minutes 36                            (writes models-shipped/demo-k3-dspark)
  node tools/train-dspark/eval.mjs --write                                    (engine acceptance into train.json)

The forward is the one src/model/dspark-ref.ts computes, batched: context rows c_p =
RMSNorm(fc . taps_p) for every position; per anchor a (a position the target emitted), the block
[anchor, mask x 6] at positions a .. a+6, each layer attending (bidirectionally in the block) over
the context rows before a and the block; slot k's logits through K3's lm_head plus the Markov bias
markov_w2 . markov_w1[token at a+k] score the token at a+k+1 (teacher forced). The loss is the
cross-entropy of every slot, weighted exp(-k / gamma) (an early slot's miss ends the sweep), plus the
confidence head's logistic loss on whether the slot's argmax is the target's token (the head reads
detached features: it estimates, it does not steer). Weights are rounded to BF16 on the way in
(straight through), so the stored drafter is the one that learned. Written every few minutes too.
"""

import os

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, 'tools', 'train-demo'))

import autograd as ag  # noqa: E402
from autograd import Var  # noqa: E402
from k3_numpy import bf16_bits, bf16_round, write_safetensors  # noqa: E402
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location('train_demo', os.path.join(ROOT, 'tools', 'train-demo', 'train.py'))
_demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_demo)
AdamW = _demo.AdamW  # the demo trainer's optimizer


class Data:
    def __init__(self, d):
        self.taps = np.load(os.path.join(d, 'taps.npy'), mmap_mode='r')
        self.tokens = np.load(os.path.join(d, 'tokens.npy'))
        self.seqs = np.load(os.path.join(d, 'seqs.npy'))
        self.embed = np.load(os.path.join(d, 'embed.npy'))
        self.lm_head = np.load(os.path.join(d, 'lm_head.npy'))
        self.rope = json.load(open(os.path.join(d, 'rope.json')))
        self.info = json.load(open(os.path.join(d, 'info.json')))


def init_params(cfg, rng):
    H, I, L = cfg['hidden_size'], cfg['intermediate_size'], cfg['num_hidden_layers']
    NH, KV, d = cfg['num_attention_heads'], cfg['num_key_value_heads'], cfg['head_dim']
    V, R = cfg['vocab_size'], cfg['markov_rank']
    W = len(cfg['dflash_config']['target_layer_ids']) * cfg['target_hidden_size']
    n = lambda *s, std=0.02: (rng.standard_normal(s) * std).astype(np.float32)  # noqa: E731
    one = lambda k: np.ones(k, np.float32)  # noqa: E731
    p = {'fc.weight': n(H, W, std=1 / math.sqrt(W)), 'hidden_norm.weight': one(H), 'norm.weight': one(H)}
    for i in range(L):
        q = f'layers.{i}.'
        p.update({
            q + 'input_layernorm.weight': one(H), q + 'post_attention_layernorm.weight': one(H),
            q + 'self_attn.q_proj.weight': n(NH * d, H, std=1 / math.sqrt(H)),
            q + 'self_attn.k_proj.weight': n(KV * d, H, std=1 / math.sqrt(H)),
            q + 'self_attn.v_proj.weight': n(KV * d, H, std=1 / math.sqrt(H)),
            q + 'self_attn.o_proj.weight': n(H, NH * d, std=0.5 / math.sqrt(NH * d * L)),
            q + 'self_attn.q_norm.weight': one(d), q + 'self_attn.k_norm.weight': one(d),
            q + 'mlp.gate_proj.weight': n(I, H, std=1 / math.sqrt(H)), q + 'mlp.up_proj.weight': n(I, H, std=1 / math.sqrt(H)),
            q + 'mlp.down_proj.weight': n(H, I, std=0.5 / math.sqrt(I * L)),
        })
    p['markov_head.markov_w1.weight'] = n(V, R, std=1.0)
    p['markov_head.markov_w2.weight'] = np.zeros((V, R), np.float32)
    p['confidence_head.proj.weight'] = np.zeros((1, H + R), np.float32)
    p['confidence_head.proj.bias'] = np.zeros(1, np.float32)
    return p


def rope(x, cos, sin):
    """Split-half rotation of x [..., d] (Qwen3's pairs); cos, sin [..., d/2] broadcast (amplitude folded in)."""
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return ag.concat([a * cos - b * sin, b * cos + a * sin], -1)


def pick_batch(rng, data, idx, seqs_per_batch, anchors):
    """B sequences; per sequence up to `anchors` anchor positions in its generated part."""
    rows = data.seqs[rng.choice(idx, seqs_per_batch, replace=False)]
    T = int(max(r[2] - 1 for r in rows))
    B, W = len(rows), data.taps.shape[1]
    taps = np.zeros((B, T, W), np.float32)
    anc = np.zeros((B, anchors), np.int64)
    ok = np.zeros((B, anchors), np.float32)
    toks = []
    for i, (off, P, L, toff) in enumerate(rows):
        taps[i, :L - 1] = data.taps[toff:toff + L - 1]
        cand = np.arange(P, L - 1)
        pick = np.sort(rng.choice(cand, min(anchors, len(cand)), replace=False))
        anc[i, :len(pick)] = pick
        ok[i, :len(pick)] = 1
        toks.append(data.tokens[off:off + L])
    return taps, anc, ok, toks


class Drafter:
    def __init__(self, cfg, data):
        self.cfg = cfg
        self.data = data
        self.S = cfg['block_size']
        self.freqs = np.array(data.rope['freqs'], np.float64)
        self.amp = data.rope['amplitude']
        self.mask_id = cfg['dflash_config']['mask_token_id']
        self.eps = cfg['rms_norm_eps']

    def trig(self, pos):
        ang = pos[..., None].astype(np.float64) * self.freqs
        return (np.cos(ang) * self.amp).astype(np.float32), (np.sin(ang) * self.amp).astype(np.float32)

    def forward(self, w, taps, anc, toks):
        """Scores [B, A, S, V] of the block's slots and the final hidden [B, A, S, H]; prev ids [B, A, S]; targets."""
        c = self.cfg
        NH, KV, d, L = c['num_attention_heads'], c['num_key_value_heads'], c['head_dim'], c['num_hidden_layers']
        G = NH // KV
        B, T, _ = taps.shape
        A, S = anc.shape[1], self.S
        V = c['vocab_size']
        ctx = ag.rmsnorm(ag.linear(Var(taps), w('fc.weight')), w('hidden_norm.weight'), self.eps)  # [B,T,H]
        tpos = np.arange(T)
        bpos = anc[:, :, None] + np.arange(S)  # [B,A,S]
        cc, sc = self.trig(tpos)  # [T, d/2]
        cb, sb = self.trig(bpos)  # [B,A,S,d/2]
        cc, sc = cc[None, :, None, :], sc[None, :, None, :]
        cb, sb = cb[:, :, :, None, :], sb[:, :, :, None, :]
        # context rows before the anchor: additive mask [B,1,A,1,T]
        mask = np.where(tpos[None, None, :] < anc[:, :, None], 0.0, -1e9).astype(np.float32)[:, None, :, None, :]
        ids = np.full((B, A, S), self.mask_id)
        prev = np.zeros((B, A, S), np.int64)
        tgt = np.zeros((B, A, S), np.int64)
        valid = np.zeros((B, A, S), np.float32)
        for b in range(B):
            tk = toks[b]
            for j in range(A):
                a = anc[b, j]
                ids[b, j, 0] = tk[a]
                for k in range(S):
                    if a + k + 1 < len(tk):
                        prev[b, j, k] = tk[a + k]
                        tgt[b, j, k] = tk[a + k + 1]
                        valid[b, j, k] = 1
        x = Var(self.data.embed[ids])  # [B,A,S,H]
        scale = 1 / math.sqrt(d)
        for i in range(L):
            p = f'layers.{i}.self_attn.'
            kn, qn = w(p + 'k_norm.weight'), w(p + 'q_norm.weight')
            kc = rope(ag.rmsnorm(ag.reshape(ag.linear(ctx, w(p + 'k_proj.weight')), (B, T, KV, d)), kn, self.eps), cc, sc)
            vc = ag.reshape(ag.linear(ctx, w(p + 'v_proj.weight')), (B, T, KV, d))
            h = ag.rmsnorm(x, w(f'layers.{i}.input_layernorm.weight'), self.eps)
            q = rope(ag.rmsnorm(ag.reshape(ag.linear(h, w(p + 'q_proj.weight')), (B, A, S, NH, d)), qn, self.eps), cb, sb)
            kb = rope(ag.rmsnorm(ag.reshape(ag.linear(h, w(p + 'k_proj.weight')), (B, A, S, KV, d)), kn, self.eps), cb, sb)
            vb = ag.reshape(ag.linear(h, w(p + 'v_proj.weight')), (B, A, S, KV, d))
            qg = ag.transpose(ag.reshape(q, (B, A, S, KV, G, d)), (0, 3, 1, 2, 4, 5))  # [B,KV,A,S,G,d]
            s_c = ag.reshape(ag.matmul(ag.reshape(qg, (B, KV, A * S * G, d)), ag.transpose(kc, (0, 2, 3, 1))), (B, KV, A, S * G, T))
            s_b = ag.matmul(ag.reshape(qg, (B, KV, A, S * G, d)), ag.transpose(kb, (0, 3, 1, 4, 2)))  # [B,KV,A,SG,S]
            s_c = s_c * scale + mask
            s_b = s_b * scale
            m = np.maximum(s_c.v.max(-1, keepdims=True), s_b.v.max(-1, keepdims=True))
            e_c, e_b = ag.exp(s_c - m), ag.exp(s_b - m)
            z = ag.sum_(e_c, -1, keepdims=True) + ag.sum_(e_b, -1, keepdims=True)
            o_c = ag.reshape(ag.matmul(ag.reshape(e_c, (B, KV, A * S * G, T)), ag.transpose(vc, (0, 2, 1, 3))), (B, KV, A, S * G, d))
            o_b = ag.matmul(e_b, ag.transpose(vb, (0, 3, 1, 2, 4)))  # [B,KV,A,SG,d]
            o = (o_c + o_b) * ag.recip(z)
            o = ag.reshape(ag.transpose(ag.reshape(o, (B, KV, A, S, G, d)), (0, 2, 3, 1, 4, 5)), (B, A, S, NH * d))
            y = x + ag.linear(o, w(p + 'o_proj.weight'))
            mm = ag.rmsnorm(y, w(f'layers.{i}.post_attention_layernorm.weight'), self.eps)
            q2 = f'layers.{i}.mlp.'
            act = ag.silu(ag.linear(mm, w(q2 + 'gate_proj.weight'))) * ag.linear(mm, w(q2 + 'up_proj.weight'))
            x = y + ag.linear(act, w(q2 + 'down_proj.weight'))
        hid = ag.rmsnorm(x, w('norm.weight'), self.eps)
        e = ag.take_rows(w('markov_head.markov_w1.weight'), prev)
        scores = ag.linear(hid, Var(self.data.lm_head)) + ag.linear(e, w('markov_head.markov_w2.weight'))
        return scores, hid, e, tgt, valid, V


def run_batch(model, params, batch, gamma, train, keep_scores=False):
    taps, anc, ok, toks = batch
    ag.clear()
    leaves = {n: Var(t, train) for n, t in params.items() if not n.startswith('confidence_head')}
    rounded = {n: ag.ste(v, bf16_round) for n, v in leaves.items()}

    def w(name):
        return rounded[name]
    scores, hid, e, tgt, valid, V = model.forward(w, taps, anc, toks)
    S = tgt.shape[-1]
    wt = valid * ok[:, :, None] * np.exp(-np.arange(S) / gamma)[None, None, :].astype(np.float32)
    loss = ag.cross_entropy(ag.reshape(scores, (-1, V)), tgt.reshape(-1), wt.reshape(-1))
    hit = (scores.v.argmax(-1) == tgt).astype(np.float32)
    # the confidence head on detached [h, markov_w1[prev]]: logistic regression on the slot's hit
    feat = np.concatenate([hid.v, e.v], -1)
    cw, cb = params['confidence_head.proj.weight'], params['confidence_head.proj.bias']
    zc = feat @ bf16_round(cw)[0] + bf16_round(cb)[0]
    pc = 0.5 * (1 + np.tanh(0.5 * zc))
    cm = valid * ok[:, :, None]
    stats = {'loss': float(loss.v), 'hit': hit, 'mask': cm, 'conf': pc}
    if keep_scores:
        stats['scores'] = scores.v
    if not train:
        ag.clear()
        return stats, None
    ag.backward(loss)
    grads = {n: (v.g if v.g is not None else np.zeros_like(params[n])) for n, v in leaves.items()}
    gz = (pc - hit) * cm / max(cm.sum(), 1)
    grads['confidence_head.proj.weight'] = (gz[..., None] * feat).reshape(-1, feat.shape[-1]).sum(0)[None, :].astype(np.float32)
    grads['confidence_head.proj.bias'] = np.array([gz.sum()], np.float32)
    return stats, grads


def accept_len(hit, mask):
    """Per anchor: drafts accepted greedily (the run of hits from slot 0), over valid anchors."""
    run = np.cumprod(hit * (mask > 0), -1).sum(-1)
    any_ = mask[..., 0] > 0
    return run[any_]


def save(out, cfg, params, info):
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, 'model.safetensors.tmp')
    write_safetensors(tmp, {n: ('BF16', bf16_bits(t)) for n, t in params.items()})
    os.replace(tmp, os.path.join(out, 'model.safetensors'))
    json.dump(cfg, open(os.path.join(out, 'config.json'), 'w'), indent=2)
    path = os.path.join(out, 'train.json')
    old = json.load(open(path)) if os.path.exists(path) else {}
    old.update(info)
    json.dump(old, open(path, 'w'), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default=os.path.join(ROOT, 'models', 'train-dspark-data'))
    ap.add_argument('--config', default=os.path.join(HERE, 'config', 'config.json'))
    ap.add_argument('--out', default=os.path.join(ROOT, 'models-shipped', 'demo-k3-dspark'))
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--minutes', type=float, default=36)
    ap.add_argument('--steps', type=int, default=1000000)
    ap.add_argument('--seqs', type=int, default=8, help='sequences per batch')
    ap.add_argument('--anchors', type=int, default=24, help='anchors per sequence')
    ap.add_argument('--lr', type=float, default=2e-3)
    ap.add_argument('--gamma', type=float, default=4.0, help='slot k weighs exp(-k / gamma)')
    ap.add_argument('--save-minutes', type=float, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    cfg = json.load(open(args.config))
    data = Data(args.data)
    n = len(data.seqs)
    perm = np.random.default_rng(0).permutation(n)
    val_idx, train_idx = perm[:max(16, n // 20)], perm[max(16, n // 20):]
    params = init_params(cfg, rng)
    print(f'{sum(t.size for t in params.values())} parameters, {len(train_idx)} train / {len(val_idx)} validation sequences', flush=True)
    model = Drafter(cfg, data)
    opt = AdamW({k: v for k, v in params.items() if not k.startswith('confidence_head')}, args.lr, wd=0.0)
    copt = AdamW({k: v for k, v in params.items() if k.startswith('confidence_head')}, args.lr, wd=0.0)
    vrng = np.random.default_rng(123)
    val_batches = [pick_batch(vrng, data, val_idx, min(8, len(val_idx)), args.anchors) for _ in range(6)]

    def validate():
        hits, masks, confs, acc = [], [], [], []
        for b in val_batches:
            st, _ = run_batch(model, params, b, args.gamma, False)
            acc.append(accept_len(st['hit'], st['mask']))
            m = st['mask'] > 0
            hits.append(st['hit'][m])
            confs.append(st['conf'][m])
        acc = np.concatenate(acc)
        h, cf = np.concatenate(hits), np.concatenate(confs)
        return {'teacher_forced_tokens_per_sweep': round(1 + float(acc.mean()), 3), 'slot_hit': round(float(h.mean()), 3),
                'confidence_brier': round(float(((cf - h) ** 2).mean()), 4)}

    def info(step, secs, ema, v):
        return {
            'task': 'a DSpark drafter (RadixArk layout) for models-shipped/demo-k3-trained, self-distilled on its greedy continuations',
            'command': 'OPENBLAS_NUM_THREADS=1 python3 tools/train-dspark/train.py ' + ' '.join(sys.argv[1:]),
            'data': data.info.get('command'), 'data_sequences': int(n), 'seed': args.seed, 'steps': step,
            'seqs_per_batch': args.seqs, 'anchors_per_seq': args.anchors, 'lr': args.lr, 'gamma': args.gamma,
            'numpy': np.__version__, 'seconds': round(secs), 'final_loss': round(ema, 4), 'validation': v,
        }

    t0 = time.time()
    last_save = t0
    ema = None
    step = 0
    while step < args.steps:
        frac = max(step / args.steps, (time.time() - t0) / (60 * args.minutes))
        if frac >= 1:
            break
        lr = args.lr * (frac / 0.03 if frac < 0.03 else 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (frac - 0.03) / 0.97)))
        st, grads = run_batch(model, params, pick_batch(rng, data, train_idx, args.seqs, args.anchors), args.gamma, True)
        cg = {k: grads.pop(k) for k in list(grads) if k.startswith('confidence_head')}
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        if norm > 1.0:
            for g in grads.values():
                g *= 1.0 / norm
        opt.step(grads, lr)
        copt.step(cg, lr)
        ema = st['loss'] if ema is None else 0.95 * ema + 0.05 * st['loss']
        step += 1
        if step % 50 == 0:
            print(f'step {step} {time.time() - t0:.0f}s lr {lr:.2e} loss {ema:.4f}', flush=True)
        if step % 250 == 0:
            print(f'  validation {validate()}', flush=True)
        if time.time() - last_save > 60 * args.save_minutes:
            save(args.out, cfg, params, info(step, time.time() - t0, ema, validate()))
            last_save = time.time()
    v = validate()
    save(args.out, cfg, params, info(step, time.time() - t0, ema, v))
    print(f'{step} steps in {time.time() - t0:.0f}s; validation {v}; wrote {args.out}', flush=True)


if __name__ == '__main__':
    main()
