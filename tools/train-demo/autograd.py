"""A small reverse-mode autograd on numpy: just the operations the K3 forward (k3_numpy.py) needs.

Every operation on a Var records its backward on one global tape; backward() walks the tape in
reverse. Broadcasting is allowed wherever numpy allows it; gradients are summed back to each
input's shape. Values stay in the dtype they come in (float32 to train, float64 to check).
"""

import numpy as np

_tape = []


class Var:
    __slots__ = ('v', 'g', 'req')

    def __init__(self, v, req=False):
        self.v = v
        self.g = None
        self.req = req

    shape = property(lambda s: s.v.shape)
    ndim = property(lambda s: s.v.ndim)

    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return add(self, neg(o))
    def __rsub__(self, o): return add(o, neg(self))
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return mul(self, recip(o)) if isinstance(o, Var) else mul(self, 1.0 / o)
    def __neg__(self): return neg(self)
    def __matmul__(self, o): return matmul(self, o)
    def __getitem__(self, idx): return getitem(self, idx)


def val(x):
    return x.v if isinstance(x, Var) else x


def _needs(*xs):
    return any(isinstance(x, Var) and x.req for x in xs)


def _acc(x, g):
    """Add gradient g into x (summing broadcast axes back to x's shape)."""
    if not (isinstance(x, Var) and x.req):
        return
    if g.shape != x.v.shape:
        nd = g.ndim - x.v.ndim
        if nd:
            g = g.sum(tuple(range(nd)))
        axes = tuple(i for i, n in enumerate(x.v.shape) if n == 1 and g.shape[i] != 1)
        if axes:
            g = g.sum(axes, keepdims=True)
    x.g = g if x.g is None else x.g + g


def _op(value, inputs, backward):
    out = Var(value, _needs(*inputs))
    if out.req:
        _tape.append((out, backward))
    return out


def backward(loss):
    loss.g = np.ones_like(loss.v)
    for out, fn in reversed(_tape):
        if out.g is not None:
            fn(out.g)
            out.g = None  # intermediates are not kept
    _tape.clear()


def clear():
    _tape.clear()


# ---------------------------------------------------------------- elementwise

def add(a, b):
    return _op(val(a) + val(b), (a, b), lambda g: (_acc(a, g), _acc(b, g)))


def neg(a):
    return _op(-val(a), (a,), lambda g: _acc(a, -g))


def mul(a, b):
    av, bv = val(a), val(b)
    return _op(av * bv, (a, b), lambda g: (_acc(a, g * bv), _acc(b, g * av)))


def recip(a):
    r = 1.0 / a.v
    return _op(r, (a,), lambda g: _acc(a, -g * r * r))


def exp(a):
    e = np.exp(a.v)
    return _op(e, (a,), lambda g: _acc(a, g * e))


def _sig(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


def sigmoid(a):
    s = _sig(a.v)
    return _op(s, (a,), lambda g: _acc(a, g * s * (1 - s)))


def tanh(a):
    t = np.tanh(a.v)
    return _op(t, (a,), lambda g: _acc(a, g * (1 - t * t)))


def silu(a):
    s = _sig(a.v)
    return _op(a.v * s, (a,), lambda g: _acc(a, g * s * (1 + a.v * (1 - s))))


def square(a):
    return _op(a.v * a.v, (a,), lambda g: _acc(a, 2 * g * a.v))


def rsqrt(a):
    r = 1.0 / np.sqrt(a.v)
    return _op(r, (a,), lambda g: _acc(a, -0.5 * g * r * r * r))


def ste(a, fn):
    """Straight-through estimate: the value fn(a), the gradient of the identity."""
    return _op(fn(a.v), (a,), lambda g: _acc(a, g))


# ---------------------------------------------------------------- reductions and shapes

def sum_(a, axis, keepdims=False):
    shape = a.v.shape

    def bw(g):
        if not keepdims:
            g = np.expand_dims(g, axis)
        _acc(a, np.broadcast_to(g, shape))
    return _op(a.v.sum(axis, keepdims=keepdims), (a,), bw)


def mean(a, axis, keepdims=False):
    n = np.prod([a.v.shape[i] for i in np.atleast_1d(axis)])
    return sum_(a, axis, keepdims) * (1.0 / n)


def reshape(a, shape):
    s = a.v.shape
    return _op(a.v.reshape(shape), (a,), lambda g: _acc(a, g.reshape(s)))


def transpose(a, axes):
    inv = np.argsort(axes)
    return _op(a.v.transpose(axes), (a,), lambda g: _acc(a, g.transpose(inv)))


def getitem(a, idx):
    def bw(g):
        full = np.zeros_like(a.v)
        full[idx] = g
        _acc(a, full)
    return _op(a.v[idx], (a,), bw)


def concat(xs, axis):
    sizes = np.cumsum([x.v.shape[axis] for x in xs])[:-1]

    def bw(g):
        for x, part in zip(xs, np.split(g, sizes, axis)):
            _acc(x, part)
    return _op(np.concatenate([x.v for x in xs], axis), xs, bw)


def stack(xs, axis):
    def bw(g):
        for i, x in enumerate(xs):
            _acc(x, np.take(g, i, axis))
    return _op(np.stack([x.v for x in xs], axis), xs, bw)


def take_rows(a, idx, unique=False):
    """a[idx] along axis 0 (embedding lookup, token gather); unique: no index repeats."""
    def bw(g):
        full = np.zeros_like(a.v)
        if unique:
            full[idx] = g
        else:
            np.add.at(full, idx.reshape(-1), g.reshape(-1, *a.v.shape[1:]))
        _acc(a, full)
    return _op(a.v[idx], (a,), bw)


def scatter_rows(n, idx, x):
    """A zero [n, ...] array with x's rows at the distinct indices idx."""
    out = np.zeros((n,) + x.v.shape[1:], x.v.dtype)
    out[idx] = x.v
    return _op(out, (x,), lambda g: _acc(x, g[idx]))


def unstack(a, axis):
    """The slices of a along axis, as separate Vars (one gradient buffer, not one per slice)."""
    pieces = [Var(x, a.req) for x in np.moveaxis(a.v, axis, 0)]
    if a.req:
        marker = Var(None, True)
        marker.g = True  # always run: it gathers the pieces' gradients

        def bw(_):
            _acc(a, np.stack([p.g if p.g is not None else np.zeros_like(p.v) for p in pieces], axis))
        _tape.append((marker, bw))
    return pieces


# ---------------------------------------------------------------- products

def matmul(a, b):
    av, bv = val(a), val(b)

    def bw(g):
        if isinstance(a, Var) and a.req:
            _acc(a, g @ np.swapaxes(bv, -1, -2))
        if isinstance(b, Var) and b.req:
            if bv.ndim == 2 and av.ndim > 2:  # shared weight: fold the batch axes into one product
                _acc(b, av.reshape(-1, av.shape[-1]).T @ g.reshape(-1, g.shape[-1]))
            else:
                _acc(b, np.swapaxes(av, -1, -2) @ g)
    return _op(av @ bv, (a, b), bw)


def linear(x, w):
    """x [..., in] @ w[out, in]^T, as one 2-D product (BLAS; numpy's stacked products are slow)."""
    xv, wv = x.v.reshape(-1, x.v.shape[-1]), w.v
    lead = x.v.shape[:-1]

    def bw(g):
        g2 = g.reshape(-1, g.shape[-1])
        if x.req:
            _acc(x, (g2 @ wv).reshape(x.v.shape))
        if w.req:
            _acc(w, g2.T @ xv)
    return _op((xv @ wv.T).reshape(lead + (wv.shape[0],)), (x, w), bw)


def solve(a, b):
    """a^-1 b for batched square a."""
    xv = np.linalg.solve(a.v, b.v)

    def bw(g):
        gb = np.linalg.solve(np.swapaxes(a.v, -1, -2), g)
        _acc(b, gb)
        _acc(a, -gb @ np.swapaxes(xv, -1, -2))
    return _op(xv, (a, b), bw)


# ---------------------------------------------------------------- fused pieces

def rmsnorm(x, w, eps):
    """w * x / sqrt(mean(x^2) + eps) over the last axis."""
    r = 1.0 / np.sqrt((x.v * x.v).mean(-1, keepdims=True) + eps)
    xh = x.v * r
    wv = val(w)

    def bw(g):
        _acc(w, g * xh)
        gx = g * wv
        _acc(x, r * (gx - xh * (gx * xh).mean(-1, keepdims=True)))
    return _op(xh * wv, (x, w), bw)


def softmax(a, axis):
    m = a.v - a.v.max(axis, keepdims=True)
    e = np.exp(m)
    p = e / e.sum(axis, keepdims=True)
    return _op(p, (a,), lambda g: _acc(a, p * (g - (g * p).sum(axis, keepdims=True))))


def cross_entropy(logits, targets, weight):
    """Sum over rows of weight * -log softmax(logits)[target], divided by the weights' sum.
    logits [R, V], targets [R] int, weight [R]."""
    z = logits.v - logits.v.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1, keepdims=True))
    logp = z - lse
    rows = np.arange(len(targets))
    tot = weight.sum()
    loss = -(weight * logp[rows, targets]).sum() / tot

    def bw(g):
        d = np.exp(logp)
        d[rows, targets] -= 1
        _acc(logits, g * d * (weight / tot)[:, None])
    return _op(np.asarray(loss, logits.v.dtype), (logits,), bw)
