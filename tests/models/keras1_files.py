"""Synthetic but faithful Keras 1 (1.0-1.2.2) model files, with what the model computes.

Keras 1 cannot be installed here, so this module writes, with h5py, the bytes that
Keras 1 wrote, as read from its own source (the PyPI sdists Keras-1.0.0 ... 1.2.2,
files named below), from weights chosen with numpy. The expected output of every
file is computed twice, independently, and the two must agree to 1e-5:

* a Keras 3 model rebuilt in NHWC with the kernels converted the way Keras 1
  itself computed (``_keras3_model``): that output is ``Keras1File.expected``;
* a float64 numpy interpreter of the Keras 1 semantics, working in the layout
  the Keras 1 model held (NCHW for ``dim_ordering='th'``), ``_numpy_forward``.

What Keras 1 wrote (Keras-1.2.2/keras/models.py ``save_model``,
engine/topology.py ``Container.save_weights_to_hdf5_group``):

* full model (``model.save``, Keras >= 1.0.7): root attrs ``keras_version``,
  ``model_config`` (JSON, Sequential config is a *list* of layers) and, when
  compiled, ``training_config``; group ``model_weights`` with attr
  ``layer_names`` only (no ``keras_version``, no ``backend`` anywhere: Keras 1
  never recorded the backend); group ``optimizer_weights`` when compiled.
* weights only (``save_weights``, every 1.x): root attr ``layer_names`` only.
  The architecture is ``model.to_json()``: ``{"class_name", "config",
  "keras_version"}`` (no ``keras_version`` before 1.0.4; 1.0.4-1.0.6 also wrote
  ``optimizer``/``loss``/``sample_weight_mode``/``loss_weights`` there).
* per layer a group with attr ``weight_names`` (``[]`` -> an empty float64
  array when the layer has no weights); datasets named after the backend
  variable: Theano ``convolution2d_1_W``, TensorFlow ``convolution2d_1_W:0``.
* strings are bytes -> h5py fixed-length, NULLPAD (``|S<n>``).

Kernel storage: 'th' (nb_filter, stack, rows, cols); 'tf' (rows, cols, stack,
nb_filter). Theano (T.nnet.conv2d, filter_flip=True) computes a true convolution,
TensorFlow a cross-correlation: a kernel saved by a Theano-backend Keras 1 must be
flipped in rows and columns to be used as a Keras 2/3 (cross-correlation) kernel.
Nothing in the file says which backend wrote it, except the weight names (':0').

Inputs (``Keras1File.x``) are in the layout Keras 1 was fed: (N, 1, 28, 28) for
'th', (N, 28, 28, 1) for 'tf', (N, 784) for MLPs; the first 64 MNIST test digits
scaled by 1/255 (random in [0, 1) when MNIST is not found).

    python tests/models/keras1_files.py [DIR]      # writes the files (default: a new temp dir), prints a table
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MNIST_DIR = Path(os.environ.get("LENET_MNIST_DIR", Path(__file__).resolve().parents[3] / "shared" / "mnist"))
N_SAMPLES = 64
TOLERANCE = 1e-5

# name -> what it covers. Tests can parametrize over this without building anything.
CASES: dict[str, str] = {
    "k1_th_theano": "full model 1.2.2, Theano backend, 'th': classic mnist_cnn (Conv 32 3x3 relu, Conv 32 3x3 relu, "
    "MaxPool 2, Dropout, Flatten, Dense 128 relu, Dropout, Dense 10 softmax); kernels are "
    "true-convolution kernels (flip them); names without ':0'; Adadelta training_config + "
    "optimizer_weights",
    "k1_th_tf": "full model 1.2.2, TensorFlow backend, 'th': same net; kernels (O,I,H,W), no flip; names with ':0'; "
    "first Dense rows in C,H,W order",
    "k1_tf_tf": "full model 1.1.0, TensorFlow backend, 'tf': same net with separate Activation layers (as the "
    "Keras 1 mnist_cnn example); kernels (H,W,I,O); not compiled (no training_config)",
    "k1_th_theano_weights": "save_weights + to_json (keras_version 1.0.8 in the JSON only), Theano, 'th': same net",
    "k1_tf_tf_weights": "save_weights + to_json (1.2.2), TensorFlow, 'tf': same net",
    "k1_tf_theano": "full model 1.2.2, Theano backend, 'tf': same net; kernels (H,W,I,O) but true-convolution "
    "kernels (flip them); names without ':0'",
    "k1_th_tf_weights": "save_weights + to_json (1.2.2), TensorFlow, 'th': same net; kernels (O,I,H,W), names with "
    "':0'",
    "k1_tf_theano_weights": "save_weights + to_json (1.2.2), Theano, 'tf': same net; kernels (H,W,I,O), flipped",
    "k1_th_tf_weights_k2arch": "the weights file of k1_th_tf_weights (no keras_version: Keras 1 layouts) with a "
    "Keras 2 architecture (tf_keras to_json: Conv2D data_format='channels_first', "
    "Flatten channels_last): the weights file decides the layout, as in Keras 2; "
    "checked against tf_keras' own load_weights + predict",
    "k1_th_theano_weights_k2arch": "the same with the weights of k1_th_theano_weights (Theano names): tf_keras' "
    "loaded kernels, turned by Keras 2's convert_kernel, give the expected output",
    "k1_mlp": "full model 1.0.7 (the first version with model.save), mnist_mlp: Dense(256, input_dim=784) relu, "
    "Dropout, Dense 256 relu, Dropout, Dense 10 softmax",
    "k1_mlp_v100_weights": "save_weights + to_json of Keras 1.0.0-1.0.3: the JSON has no keras_version at all; "
    "Theano names",
    "k1_same_s2": "full model 1.2.2, TensorFlow, 'tf': Conv 3x3 border_mode='same' subsample (2,2) (28->14, pad 0/1), "
    "Conv 4x4 'same' (pad 1/2), MaxPool 3 s2 'same', AvgPool 2 'same' (divides by real pixels), "
    "Dense tanh, Dense softmax",
    "k1_th_theano_same_s2": "full model 1.2.2, Theano, 'th': Conv 3x3 'same' subsample (2,2), Conv 4x4 'same', "
    "MaxPool 2 'same': Theano pads symmetrically (k//2 for conv, k-1 / k-2 for pools) and "
    "crops the end; differs from TensorFlow 'same' and from Keras 2/3",
    "k1_bn": "full model 1.2.2, TensorFlow, 'th': ZeroPadding2D (its config has no dim_ordering: a Keras 1 bug), "
    "Conv bias=False, BatchNormalization(mode=0, axis=1), Dense, BatchNormalization(mode=0), "
    "running_std holds a VARIANCE: (x-m)/sqrt(v+eps)",
    "k1_bn_v104_weights": "save_weights + to_json of Keras 1.0.4 (JSON has keras_version 1.0.4 and optimizer/loss): "
    "BatchNormalization whose running_std is a STANDARD DEVIATION: (x-m)/(std+eps), eps 1e-6",
    "k1_functional": "full model 1.2.2, TensorFlow, 'tf', class Model: InputLayer 'image' (listed in layer_names, "
    "no weights), layers named c1/s2/c3/s4/f5/out, inbound_nodes [[name, 0, 0]] (3 items)",
    "k1_merge": "full model 1.2.2, TensorFlow: Sequential whose first layer is Merge(concat) of two Sequential "
    "branches (two model inputs; Merge is not in layer_names). Expected is for both inputs = x: an "
    "engine with one input should refuse it precisely",
}


@dataclass
class Keras1File:
    name: str
    path: Path  # the .h5 (full model, or weights-only)
    arch: Optional[Path]  # the Keras 1 model.to_json() file for weights-only files, else None
    input_shape: tuple  # per-sample input shape as Keras 1 declared it
    x: np.ndarray  # float32 inputs in that shape
    expected: np.ndarray  # what the model outputs on x (float32)
    notes: str
    keras_version: str = ""  # the Keras 1 version written/simulated
    backend: str = ""  # 'theano' | 'tensorflow' (never recorded in the file)
    dim_ordering: str = ""  # 'th' | 'tf' | '' (no image layers)
    kind: str = ""  # 'full' | 'weights'
    max_abs_diff_numpy: float = 0.0  # |Keras 3 - float64 numpy reference|
    traps: dict = field(default_factory=dict)  # wrong reading -> max |output difference|


# ------------------------------------------------------------------ Keras 1 configs
# Layer.get_config (engine/topology.py) puts name, trainable, [batch_input_shape,
# input_dtype] first, then the layer's own keys (dict(base + config)).


def _base(name, batch_input_shape=None):
    c = {"name": name, "trainable": True}
    if batch_input_shape is not None:
        c["batch_input_shape"] = [None] + list(batch_input_shape)
        c["input_dtype"] = "float32"
    return c


def conv2d(
    name,
    nb_filter,
    nb_row,
    nb_col,
    *,
    activation="linear",
    border_mode="valid",
    subsample=(1, 1),
    dim_ordering="th",
    bias=True,
    input_shape=None,
):
    """Keras-1.2.2/keras/layers/convolutional.py Convolution2D.get_config."""
    c = _base(name, input_shape)
    c.update(
        {
            "nb_filter": nb_filter,
            "nb_row": nb_row,
            "nb_col": nb_col,
            "init": "glorot_uniform",
            "activation": activation,
            "border_mode": border_mode,
            "subsample": list(subsample),
            "dim_ordering": dim_ordering,
            "W_regularizer": None,
            "b_regularizer": None,
            "activity_regularizer": None,
            "W_constraint": None,
            "b_constraint": None,
            "bias": bias,
        }
    )
    return {"class_name": "Convolution2D", "config": c}


def pool2d(cls, name, pool_size=(2, 2), strides=None, border_mode="valid", dim_ordering="th"):
    """_Pooling2D.get_config (layers/pooling.py): strides written out (= pool_size by default)."""
    c = _base(name)
    c.update(
        {
            "pool_size": list(pool_size),
            "border_mode": border_mode,
            "strides": list(strides if strides is not None else pool_size),
            "dim_ordering": dim_ordering,
        }
    )
    return {"class_name": cls, "config": c}


def dropout(name, p):
    c = _base(name)
    c["p"] = p
    return {"class_name": "Dropout", "config": c}


def flatten(name):
    return {"class_name": "Flatten", "config": _base(name)}


def activation(name, act):
    c = _base(name)
    c["activation"] = act
    return {"class_name": "Activation", "config": c}


def dense(name, output_dim, input_dim, *, activation="linear", bias=True, first=False):
    """core.py Dense.get_config; 1.2.x build() stores the built input_dim in the config."""
    c = _base(name, (input_dim,) if first else None)
    c.update(
        {
            "output_dim": output_dim,
            "init": "glorot_uniform",
            "activation": activation,
            "W_regularizer": None,
            "b_regularizer": None,
            "activity_regularizer": None,
            "W_constraint": None,
            "b_constraint": None,
            "bias": bias,
            "input_dim": input_dim,
        }
    )
    return {"class_name": "Dense", "config": c}


def batchnorm(name, *, epsilon=1e-3, mode=0, axis=-1, momentum=0.99, v104=False, input_shape=None):
    """normalization.py BatchNormalization.get_config (1.0.4: no regularizer keys)."""
    c = _base(name, input_shape)
    if v104:
        c.update({"epsilon": epsilon, "mode": mode, "axis": axis, "momentum": momentum})
    else:
        c.update(
            {
                "epsilon": epsilon,
                "mode": mode,
                "axis": axis,
                "gamma_regularizer": None,
                "beta_regularizer": None,
                "momentum": momentum,
            }
        )
    return {"class_name": "BatchNormalization", "config": c}


def zeropad2d(name, padding, input_shape=None):
    """ZeroPadding2D.get_config writes only 'padding' (no dim_ordering: keras-team/keras#5341)."""
    c = _base(name, input_shape)
    c["padding"] = list(padding)
    return {"class_name": "ZeroPadding2D", "config": c}


def input_layer(name, shape):
    """InputLayer.get_config (engine/topology.py): no 'trainable'."""
    return {
        "class_name": "InputLayer",
        "config": {"batch_input_shape": [None] + list(shape), "input_dtype": "float32", "sparse": False, "name": name},
    }


def adadelta_training_config():
    """models.py save_model: training_config of a model compiled with Adadelta (mnist_cnn.py)."""
    return {
        "optimizer_config": {
            "class_name": "Adadelta",
            "config": {"lr": 1.0, "rho": 0.95, "decay": 0.0, "epsilon": 1e-08},
        },
        "loss": "categorical_crossentropy",
        "metrics": ["accuracy"],
        "sample_weight_mode": None,
        "loss_weights": None,
    }


# --------------------------------------------------------------------- shapes & weights


def _conv_out(n, k, s, border_mode):
    """utils/np_utils.py conv_output_length."""
    if border_mode == "same":
        return (n + s - 1) // s
    return (n - k + s) // s


def _spatial(shape, dim_ordering):
    """(C, H, W) of a per-sample shape held in dim_ordering."""
    if len(shape) != 3:
        return None
    return (shape[0], shape[1], shape[2]) if dim_ordering == "th" else (shape[2], shape[0], shape[1])


def _pack(chw, dim_ordering):
    c, h, w = chw
    return (c, h, w) if dim_ordering == "th" else (h, w, c)


def _infer_shapes(layers, input_shape, model_ordering):
    """Per-sample output shape of each layer (Keras 1 get_output_shape_for)."""
    shapes, shp = [], tuple(input_shape)
    for L in layers:
        cn, c = L["class_name"], L["config"]
        if cn == "Convolution2D":
            C, H, W = _spatial(shp, c["dim_ordering"])
            shp = _pack(
                (
                    c["nb_filter"],
                    _conv_out(H, c["nb_row"], c["subsample"][0], c["border_mode"]),
                    _conv_out(W, c["nb_col"], c["subsample"][1], c["border_mode"]),
                ),
                c["dim_ordering"],
            )
        elif cn in ("MaxPooling2D", "AveragePooling2D"):
            C, H, W = _spatial(shp, c["dim_ordering"])
            shp = _pack(
                (
                    C,
                    _conv_out(H, c["pool_size"][0], c["strides"][0], c["border_mode"]),
                    _conv_out(W, c["pool_size"][1], c["strides"][1], c["border_mode"]),
                ),
                c["dim_ordering"],
            )
        elif cn == "ZeroPadding2D":
            C, H, W = _spatial(shp, model_ordering)
            t, b, l, r = _zp(c["padding"])
            shp = _pack((C, H + t + b, W + l + r), model_ordering)
        elif cn == "Flatten":
            shp = (int(np.prod(shp)),)
        elif cn == "Dense":
            shp = (c["output_dim"],)
        shapes.append(shp)
    return shapes


def _zp(padding):
    """ZeroPadding2D padding -> (top, bottom, left, right); 2-tuple, 4-tuple or dict."""
    if isinstance(padding, dict):
        return (
            padding.get("top_pad", 0),
            padding.get("bottom_pad", 0),
            padding.get("left_pad", 0),
            padding.get("right_pad", 0),
        )
    if len(padding) == 2:
        return (padding[0], padding[0], padding[1], padding[1])
    return tuple(padding)


def _make_weights(layers, input_shape, model_ordering, rng, bn_std=False):
    """Keras 1 weight arrays in Keras 1 storage layout, per layer name, as
    [(suffix, array)] in layer.weights order (trainable + non-trainable)."""
    out = {}
    shapes = _infer_shapes(layers, input_shape, model_ordering)
    prev = tuple(input_shape)
    n_dense = sum(1 for L in layers if L["class_name"] == "Dense")
    seen_dense = 0
    for L, shp in zip(layers, shapes):
        cn, c = L["class_name"], L["config"]
        ws = []
        if cn == "Convolution2D":
            C = _spatial(prev, c["dim_ordering"])[0]
            k_shape = (
                (c["nb_filter"], C, c["nb_row"], c["nb_col"])
                if c["dim_ordering"] == "th"
                else (c["nb_row"], c["nb_col"], C, c["nb_filter"])
            )
            fan_in = C * c["nb_row"] * c["nb_col"]
            ws.append(("W", rng.normal(0.0, np.sqrt(2.0 / fan_in), k_shape)))
            if c["bias"]:
                ws.append(("b", rng.normal(0.0, 0.1, (c["nb_filter"],))))
        elif cn == "Dense":
            seen_dense += 1
            fan_in = prev[0]
            scale = np.sqrt(2.0 / fan_in) if seen_dense < n_dense else 1.5 / np.sqrt(fan_in)
            ws.append(("W", rng.normal(0.0, scale, (fan_in, c["output_dim"]))))
            if c["bias"]:
                ws.append(("b", rng.normal(0.0, 0.1, (c["output_dim"],))))
        elif cn == "BatchNormalization":
            axis = c["axis"] if c["axis"] >= 0 else len(prev) + c["axis"] + 1
            n = (prev[axis - 1],)
            var = rng.uniform(0.005, 2.0, n)
            ws += [
                ("gamma", rng.uniform(0.5, 1.5, n)),
                ("beta", rng.normal(0.0, 0.2, n)),
                ("running_mean", rng.normal(0.0, 0.5, n)),
                ("running_std", np.sqrt(var) if bn_std else var),
            ]
        out[c["name"]] = [(s, a.astype(np.float32)) for s, a in ws]
        prev = shp
    return out


# ------------------------------------------------------------------- the HDF5 writer


def _bytes_list(names):
    """A list of bytes, as Keras 1 assigned it. h5py 2.x turned it into a numpy |S<n>
    array: a fixed-length, NULLPAD, ASCII string attribute. (h5py 3 would store a plain
    list of bytes as variable-length strings, so the array is made here explicitly.)
    An empty list stays [] -> an empty float64 array, as h5py writes it."""
    if not names:
        return []
    return np.array([n.encode("utf8") for n in names])


def _bytes(s):
    """str(...).encode('utf8') in Keras 1: a fixed-length, NULLPAD scalar string."""
    return np.bytes_(s.encode("utf8"))


def _weight_dataset_name(layer, suffix, backend):
    # add_weight(name='{}_W'.format(self.name)); TF Variable.name appends ':0'.
    return f"{layer}_{suffix}:0" if backend == "tensorflow" else f"{layer}_{suffix}"


def _write_layer_groups(f, layer_names, weights, backend):
    """Container.save_weights_to_hdf5_group (Keras-1.2.2/keras/engine/topology.py)."""
    f.attrs["layer_names"] = _bytes_list(layer_names)
    for name in layer_names:
        g = f.create_group(name)
        ws = weights.get(name, [])
        wnames = [_weight_dataset_name(name, s, backend) for s, _ in ws]
        g.attrs["weight_names"] = _bytes_list(wnames)
        for wn, (_, val) in zip(wnames, ws):
            d = g.create_dataset(wn, val.shape, dtype=val.dtype)
            d[...] = val


def write_full_model(
    path, model_config, layer_names, weights, backend, keras_version, training_config=None, optimizer_weight_shapes=None
):
    """models.py save_model (Keras >= 1.0.7)."""
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = _bytes(str(keras_version))
        f.attrs["model_config"] = _bytes(json.dumps(model_config))
        _write_layer_groups(f.create_group("model_weights"), layer_names, weights, backend)
        if training_config is not None:
            f.attrs["training_config"] = _bytes(json.dumps(training_config))
            if optimizer_weight_shapes:
                og = f.create_group("optimizer_weights")
                # Unnamed K.zeros: Theano shared variable without a name -> 'param_<i>';
                # tf.Variable -> 'Variable_<n>:0' (lr, decay, iterations took Variable..Variable_2).
                names = [
                    f"param_{i}" if backend == "theano" else f"Variable_{i + 3}:0"
                    for i in range(len(optimizer_weight_shapes))
                ]
                og.attrs["weight_names"] = _bytes_list(names)
                for n, shp in zip(names, optimizer_weight_shapes):
                    d = og.create_dataset(n, shp, dtype=np.float32)
                    d[...] = np.zeros(shp, np.float32)


def write_weights_only(path, layer_names, weights, backend):
    """Container.save_weights: layer_names at the root, nothing else."""
    import h5py

    with h5py.File(path, "w") as f:
        _write_layer_groups(f, layer_names, weights, backend)


# ------------------------------------------------------------- numpy reference (float64)


def _tf_same_pads(n, k, s):
    out = (n + s - 1) // s
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def _np_conv_nchw(x, k_oihw, stride, pads):
    """Cross-correlation, x (N,C,H,W), k (O,I,kh,kw), pads (t,b,l,r)."""
    t, b, l, r = pads
    x = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    O, I, kh, kw = k_oihw.shape
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, :: stride[0], :: stride[1]]
    # win (N, C, OH, OW, kh, kw)
    return np.einsum("ncyxij,ocij->noyx", win, k_oihw, optimize=True)


def _np_pool_nchw(x, k, s, pads, out_hw, mode):
    """Pooling over real pixels only (padding ignored), windows start at i*s - pad_before."""
    N, C, H, W = x.shape
    t, _, l, _ = pads
    oh, ow = out_hw
    y = np.empty((N, C, oh, ow))
    for i in range(oh):
        y0, y1 = max(i * s[0] - t, 0), min(i * s[0] - t + k[0], H)
        for j in range(ow):
            x0, x1 = max(j * s[1] - l, 0), min(j * s[1] - l + k[1], W)
            win = x[:, :, y0:y1, x0:x1]
            y[:, :, i, j] = win.max(axis=(2, 3)) if mode == "max" else win.mean(axis=(2, 3))
    return y


def _act(z, name):
    if name == "linear":
        return z
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "tanh":
        return np.tanh(z)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "softmax":
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    raise ValueError(name)


def _theano_pool_pad(k):
    """theano_backend.pool2d, border_mode='same'."""
    return k - 2 if (k > 2 and k % 2 == 1) else k - 1


def _np_layer(h, L, weights, backend, model_ordering, bn_std, traps):
    """One Keras 1 layer, h held in Keras 1 layout (NCHW for 'th', NHWC for 'tf')."""
    cn, c = L["class_name"], L["config"]
    ws = [a.astype(np.float64) for _, a in weights.get(c.get("name"), [])]
    if cn == "Convolution2D":
        do = c["dim_ordering"]
        x = h if do == "th" else h.transpose(0, 3, 1, 2)
        W = ws[0] if do == "th" else ws[0].transpose(3, 2, 0, 1)  # -> (O, I, kh, kw)
        if (backend == "theano") != bool(traps.get("flip_toggle")):
            W = W[:, :, ::-1, ::-1]  # true convolution
        kh, kw = W.shape[2:]
        s = tuple(c["subsample"])
        H, Wd = x.shape[2:]
        if c["border_mode"] == "valid":
            pads = (0, 0, 0, 0)
            out = _np_conv_nchw(x, W, s, pads)
        elif (backend == "theano") != bool(traps.get("same_toggle")):
            # T.nnet.conv2d border_mode='half': symmetric kh//2, kw//2; then crop to ceil(n/s).
            out = _np_conv_nchw(x, W, s, (kh // 2, kh // 2, kw // 2, kw // 2))
            out = out[:, :, : (H + s[0] - 1) // s[0], : (Wd + s[1] - 1) // s[1]]
        else:
            pads = _tf_same_pads(H, kh, s[0]) + _tf_same_pads(Wd, kw, s[1])
            out = _np_conv_nchw(x, W, s, pads)
        if c["bias"]:
            out = out + ws[1][None, :, None, None]
        out = _act(out, c["activation"])
        return out if do == "th" else out.transpose(0, 2, 3, 1)
    if cn in ("MaxPooling2D", "AveragePooling2D"):
        do = c["dim_ordering"]
        x = h if do == "th" else h.transpose(0, 3, 1, 2)
        k, s = tuple(c["pool_size"]), tuple(c["strides"])
        H, Wd = x.shape[2:]
        mode = "max" if cn == "MaxPooling2D" else "avg"
        if c["border_mode"] == "valid":
            out = _np_pool_nchw(x, k, s, (0, 0, 0, 0), ((H - k[0]) // s[0] + 1, (Wd - k[1]) // s[1] + 1), mode)
        elif (backend == "theano") != bool(traps.get("same_toggle")):
            ph, pw = _theano_pool_pad(k[0]), _theano_pool_pad(k[1])
            # pool_2d(ignore_border=True, pad=(ph, pw)) then keep the first ceil(n/s)
            out = _np_pool_nchw(x, k, s, (ph, ph, pw, pw), ((H + s[0] - 1) // s[0], (Wd + s[1] - 1) // s[1]), mode)
        else:
            pads = _tf_same_pads(H, k[0], s[0]) + _tf_same_pads(Wd, k[1], s[1])
            out = _np_pool_nchw(x, k, s, pads, ((H + s[0] - 1) // s[0], (Wd + s[1] - 1) // s[1]), mode)
        return out if do == "th" else out.transpose(0, 2, 3, 1)
    if cn == "ZeroPadding2D":
        t, b, l, r = _zp(c["padding"])
        if model_ordering == "th":
            return np.pad(h, ((0, 0), (0, 0), (t, b), (l, r)))
        return np.pad(h, ((0, 0), (t, b), (l, r), (0, 0)))
    if cn == "Flatten":
        if traps.get("hwc_flatten") and h.ndim == 4 and model_ordering == "th":
            h = h.transpose(0, 2, 3, 1)
        return h.reshape(len(h), -1)  # K.batch_flatten: C order
    if cn == "Dense":
        z = h @ ws[0]
        if c["bias"]:
            z = z + ws[1]
        return _act(z, c["activation"])
    if cn == "Activation":
        return _act(h, c["activation"])
    if cn == "Dropout":
        return h
    if cn == "BatchNormalization":
        if c["mode"] != 0:
            raise ValueError("only mode 0 has a per-sample inference")
        gamma, beta, mean, rs = ws
        axis = c["axis"] if c["axis"] >= 0 else h.ndim + c["axis"]
        shape = [1] * h.ndim
        shape[axis] = -1
        gamma, beta, mean, rs = (v.reshape(shape) for v in (gamma, beta, mean, rs))
        eps = c["epsilon"]
        std_semantics = bool(bn_std) != bool(traps.get("bn_swap"))
        if std_semantics:  # 1.0.0-1.0.4 (and 1.0.6 on Theano): a standard deviation
            return (h - mean) / (rs + eps) * gamma + beta
        return (h - mean) / np.sqrt(rs + eps) * gamma + beta  # 1.0.8-1.2.2 (and 1.0.6 on TF): a variance
    raise ValueError(f"numpy reference: no {cn}")


def _numpy_forward(spec, x, traps=None):
    traps = traps or {}
    h = x.astype(np.float64)
    if spec.get("merge"):
        outs = []
        for layers in spec["merge"]:
            b = h
            for L in layers:
                b = _np_layer(b, L, spec["weights"], spec["backend"], spec["ordering"], spec.get("bn_std"), traps)
            outs.append(b)
        h = np.concatenate(outs, axis=-1)  # Merge(mode='concat', concat_axis=-1), both inputs = x
    for L in spec["layers"]:
        h = _np_layer(h, L, spec["weights"], spec["backend"], spec["ordering"], spec.get("bn_std"), traps)
    return h


# --------------------------------------------------------- Keras 3 model (NHWC, float32)


def _keras3_model(spec):
    """The same computation in Keras 3, channels_last, with Keras 1 kernels converted:
    'th' (O,I,kh,kw) -> transpose(2,3,1,0); Theano kernels flipped [::-1, ::-1];
    Theano 'same' as explicit symmetric padding + 'valid' + crop; 'th' Flatten as
    Permute((3,1,2)) + Flatten (rows in C,H,W order)."""
    import keras
    from keras import layers as KL

    backend, ordering = spec["backend"], spec["ordering"]
    assigned = []  # (keras layer, [arrays])

    def img_shape(shp):
        return shp if len(shp) != 3 or ordering == "tf" else (shp[1], shp[2], shp[0])

    def build_chain(t, layer_list, in_shape):
        shapes = _infer_shapes(layer_list, in_shape, ordering)
        prev = in_shape
        for L, shp in zip(layer_list, shapes):
            cn, c = L["class_name"], L["config"]
            ws = [a for _, a in spec["weights"].get(c.get("name"), [])]
            if cn == "Convolution2D":
                W = ws[0] if c["dim_ordering"] == "tf" else ws[0].transpose(2, 3, 1, 0)  # HWIO
                if backend == "theano":
                    W = W[::-1, ::-1, :, :].copy()
                kh, kw = W.shape[:2]
                s = tuple(c["subsample"])
                pad = c["border_mode"]
                if pad == "same" and backend == "theano":
                    H, Wd = _spatial(prev, c["dim_ordering"])[1:]
                    t = KL.ZeroPadding2D(((kh // 2, kh // 2), (kw // 2, kw // 2)))(t)
                    pad = "valid"
                layer = KL.Conv2D(
                    c["nb_filter"], (kh, kw), strides=s, padding=pad, use_bias=c["bias"], activation=c["activation"]
                )
                t = layer(t)
                if c["border_mode"] == "same" and backend == "theano":
                    got = ((H + 2 * (kh // 2) - kh) // s[0] + 1, (Wd + 2 * (kw // 2) - kw) // s[1] + 1)
                    want = ((H + s[0] - 1) // s[0], (Wd + s[1] - 1) // s[1])
                    if got != want:
                        t = KL.Cropping2D(((0, got[0] - want[0]), (0, got[1] - want[1])))(t)
                assigned.append((layer, [W] + ws[1:]))
            elif cn in ("MaxPooling2D", "AveragePooling2D"):
                k, s = tuple(c["pool_size"]), tuple(c["strides"])
                cls = KL.MaxPooling2D if cn == "MaxPooling2D" else KL.AveragePooling2D
                if c["border_mode"] == "same" and backend == "theano":
                    if cn != "MaxPooling2D":
                        raise NotImplementedError("Theano 'same' average pooling")
                    H, Wd = _spatial(prev, c["dim_ordering"])[1:]
                    ph, pw = _theano_pool_pad(k[0]), _theano_pool_pad(k[1])
                    t = KL.Lambda(
                        lambda z, ph=ph, pw=pw: keras.ops.pad(
                            z, [[0, 0], [ph, ph], [pw, pw], [0, 0]], constant_values=-np.inf
                        )
                    )(t)
                    t = cls(k, strides=s, padding="valid")(t)
                    got = ((H + 2 * ph - k[0]) // s[0] + 1, (Wd + 2 * pw - k[1]) // s[1] + 1)
                    want = ((H + s[0] - 1) // s[0], (Wd + s[1] - 1) // s[1])
                    t = KL.Cropping2D(((0, got[0] - want[0]), (0, got[1] - want[1])))(t)
                else:
                    t = cls(k, strides=s, padding=c["border_mode"])(t)
            elif cn == "ZeroPadding2D":
                tp, bp, lp, rp = _zp(c["padding"])
                t = KL.ZeroPadding2D(((tp, bp), (lp, rp)))(t)
            elif cn == "Flatten":
                if ordering == "th" and len(prev) == 3:
                    t = KL.Permute((3, 1, 2))(t)  # NHWC -> NCHW, then C-order flatten
                t = KL.Flatten()(t)
            elif cn == "Dense":
                layer = KL.Dense(c["output_dim"], activation=c["activation"], use_bias=c["bias"])
                t = layer(t)
                assigned.append((layer, ws))
            elif cn == "Activation":
                t = KL.Activation(c["activation"])(t)
            elif cn == "Dropout":
                pass
            elif cn == "BatchNormalization":
                gamma, beta, mean, rs = ws
                eps = c["epsilon"]
                if spec.get("bn_std"):
                    var, eps_k = (rs.astype(np.float64) + eps) ** 2, 0.0  # (x-m)/(std+eps)
                else:
                    var, eps_k = rs, eps
                layer = KL.BatchNormalization(axis=-1, epsilon=eps_k)
                t = layer(t)
                assigned.append((layer, [gamma, beta, mean, np.asarray(var, np.float32)]))
            else:
                raise NotImplementedError(cn)
            prev = shp
        return t

    inp = keras.Input(shape=img_shape(spec["input_shape"]))
    if spec.get("merge"):
        outs = [build_chain(inp, layers, spec["input_shape"]) for layers in spec["merge"]]
        t = KL.Concatenate(axis=-1)(outs)
        merged_dim = sum(_infer_shapes(b, spec["input_shape"], ordering)[-1][0] for b in spec["merge"])
        t = build_chain(t, spec["layers"], (merged_dim,))
    else:
        t = build_chain(inp, spec["layers"], spec["input_shape"])
    model = keras.Model(inp, t)
    for layer, arrays in assigned:
        layer.set_weights([np.asarray(a, np.float32) for a in arrays])
    return model


def _keras3_predict(spec, x):
    model = _keras3_model(spec)
    xk = x if (len(spec["input_shape"]) != 3 or spec["ordering"] == "tf") else x.transpose(0, 2, 3, 1)
    y = model(np.ascontiguousarray(xk, dtype=np.float32), training=False)
    return np.asarray(y, dtype=np.float32)


# ------------------------------------------------------------------------ the cases


def _classic_cnn(do, separate_activations=False):
    """keras/examples/mnist_cnn.py of Keras 1 (nb_filters 32, kernel 3, pool 2, Dense 128)."""
    ishape = (1, 28, 28) if do == "th" else (28, 28, 1)
    a = "linear" if separate_activations else "relu"
    L = [conv2d("convolution2d_1", 32, 3, 3, activation=a, dim_ordering=do, input_shape=ishape)]
    if separate_activations:
        L.append(activation("activation_1", "relu"))
    L.append(conv2d("convolution2d_2", 32, 3, 3, activation=a, dim_ordering=do))
    if separate_activations:
        L.append(activation("activation_2", "relu"))
    L += [
        pool2d("MaxPooling2D", "maxpooling2d_1", (2, 2), dim_ordering=do),
        dropout("dropout_1", 0.25),
        flatten("flatten_1"),
        dense("dense_1", 128, 4608, activation=a),
    ]
    if separate_activations:
        L.append(activation("activation_3", "relu"))
    L += [
        dropout("dropout_2", 0.5),
        dense("dense_2", 10, 128, activation="linear" if separate_activations else "softmax"),
    ]
    if separate_activations:
        L.append(activation("activation_4", "softmax"))
    return ishape, L


def _specs() -> dict:
    S = {}

    ishape, L = _classic_cnn("th")
    S["k1_th_theano"] = dict(
        layers=L,
        input_shape=ishape,
        ordering="th",
        backend="theano",
        kind="full",
        keras_version="1.2.2",
        compiled=True,
        seed=11,
    )
    S["k1_th_tf"] = dict(
        layers=copy.deepcopy(L),
        input_shape=ishape,
        ordering="th",
        backend="tensorflow",
        kind="full",
        keras_version="1.2.2",
        compiled=True,
        seed=12,
    )
    S["k1_th_theano_weights"] = dict(
        layers=copy.deepcopy(L),
        input_shape=ishape,
        ordering="th",
        backend="theano",
        kind="weights",
        keras_version="1.0.8",
        seed=14,
    )

    S["k1_th_tf_weights"] = dict(
        layers=copy.deepcopy(L),
        input_shape=ishape,
        ordering="th",
        backend="tensorflow",
        kind="weights",
        keras_version="1.2.2",
        seed=24,
    )
    S["k1_th_tf_weights_k2arch"] = dict(S["k1_th_tf_weights"], layers=copy.deepcopy(L), seed=25, k2arch=True)
    S["k1_th_theano_weights_k2arch"] = dict(S["k1_th_theano_weights"], layers=copy.deepcopy(L), seed=26, k2arch=True)

    ishape, L = _classic_cnn("tf", separate_activations=True)
    S["k1_tf_tf"] = dict(
        layers=L,
        input_shape=ishape,
        ordering="tf",
        backend="tensorflow",
        kind="full",
        keras_version="1.1.0",
        compiled=False,
        seed=13,
    )
    ishape, L = _classic_cnn("tf")
    S["k1_tf_tf_weights"] = dict(
        layers=L,
        input_shape=ishape,
        ordering="tf",
        backend="tensorflow",
        kind="weights",
        keras_version="1.2.2",
        seed=15,
    )
    S["k1_tf_theano"] = dict(
        layers=copy.deepcopy(L),
        input_shape=ishape,
        ordering="tf",
        backend="theano",
        kind="full",
        keras_version="1.2.2",
        compiled=True,
        seed=27,
    )
    S["k1_tf_theano_weights"] = dict(
        layers=copy.deepcopy(L),
        input_shape=ishape,
        ordering="tf",
        backend="theano",
        kind="weights",
        keras_version="1.2.2",
        seed=28,
    )

    mlp = [
        dense("dense_1", 256, 784, activation="relu", first=True),
        dropout("dropout_1", 0.2),
        dense("dense_2", 256, 256, activation="relu"),
        dropout("dropout_2", 0.2),
        dense("dense_3", 10, 256, activation="softmax"),
    ]
    S["k1_mlp"] = dict(
        layers=copy.deepcopy(mlp),
        input_shape=(784,),
        ordering="",
        backend="tensorflow",
        kind="full",
        keras_version="1.0.7",
        compiled=True,
        seed=16,
    )
    S["k1_mlp_v100_weights"] = dict(
        layers=copy.deepcopy(mlp),
        input_shape=(784,),
        ordering="",
        backend="theano",
        kind="weights",
        keras_version="1.0.0",
        seed=17,
        json_version=None,
    )

    same = [
        conv2d(
            "convolution2d_1",
            8,
            3,
            3,
            activation="relu",
            border_mode="same",
            subsample=(2, 2),
            dim_ordering="tf",
            input_shape=(28, 28, 1),
        ),  # 28 -> 14, pad (0, 1)
        conv2d("convolution2d_2", 12, 4, 4, border_mode="same", dim_ordering="tf"),  # pad (1, 2)
        pool2d("MaxPooling2D", "maxpooling2d_1", (3, 3), (2, 2), "same", "tf"),  # 14 -> 7, pad (0, 1)
        pool2d("AveragePooling2D", "averagepooling2d_1", (2, 2), None, "same", "tf"),  # 7 -> 4
        flatten("flatten_1"),
        dense("dense_1", 32, 4 * 4 * 12, activation="tanh"),
        dense("dense_2", 10, 32, activation="softmax"),
    ]
    S["k1_same_s2"] = dict(
        layers=same,
        input_shape=(28, 28, 1),
        ordering="tf",
        backend="tensorflow",
        kind="full",
        keras_version="1.2.2",
        compiled=True,
        seed=18,
    )

    th_same = [
        conv2d(
            "convolution2d_1",
            8,
            3,
            3,
            activation="relu",
            border_mode="same",
            subsample=(2, 2),
            dim_ordering="th",
            input_shape=(1, 28, 28),
        ),  # Theano pads (1,1): 28 -> 14
        conv2d("convolution2d_2", 12, 4, 4, activation="relu", border_mode="same", dim_ordering="th"),
        pool2d("MaxPooling2D", "maxpooling2d_1", (2, 2), None, "same", "th"),  # pad 1, keep first 7
        flatten("flatten_1"),
        dense("dense_1", 10, 12 * 7 * 7, activation="softmax"),
    ]
    S["k1_th_theano_same_s2"] = dict(
        layers=th_same,
        input_shape=(1, 28, 28),
        ordering="th",
        backend="theano",
        kind="full",
        keras_version="1.2.2",
        compiled=True,
        seed=19,
    )

    bn = [
        zeropad2d("zeropadding2d_1", (2, 2), input_shape=(1, 28, 28)),  # 28 -> 32
        conv2d("convolution2d_1", 8, 5, 5, dim_ordering="th", bias=False),  # 32 -> 28
        batchnorm("batchnormalization_1", axis=1),
        activation("activation_1", "relu"),
        pool2d("MaxPooling2D", "maxpooling2d_1", (2, 2), dim_ordering="th"),  # 28 -> 14
        flatten("flatten_1"),
        dense("dense_1", 64, 8 * 14 * 14),
        batchnorm("batchnormalization_2", axis=-1),
        activation("activation_2", "relu"),
        dense("dense_2", 10, 64, activation="softmax"),
    ]
    S["k1_bn"] = dict(
        layers=bn,
        input_shape=(1, 28, 28),
        ordering="th",
        backend="tensorflow",
        kind="full",
        keras_version="1.2.2",
        compiled=True,
        seed=20,
    )

    bn104 = [
        dense("dense_1", 64, 784, first=True),
        batchnorm("batchnormalization_1", epsilon=1e-6, momentum=0.9, v104=True),
        activation("activation_1", "relu"),
        dense("dense_2", 10, None),
        activation("activation_2", "softmax"),
    ]
    S["k1_bn_v104_weights"] = dict(
        layers=bn104,
        input_shape=(784,),
        ordering="",
        backend="theano",
        kind="weights",
        keras_version="1.0.4",
        seed=21,
        bn_std=True,
        json_extra={
            "optimizer": {"name": "Adam", "lr": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-08},
            "loss": "categorical_crossentropy",
            "sample_weight_mode": None,
            "loss_weights": None,
        },
    )

    fn = [
        conv2d("c1", 6, 5, 5, activation="tanh", border_mode="same", dim_ordering="tf"),  # 28
        pool2d("AveragePooling2D", "s2", (2, 2), dim_ordering="tf"),  # 14
        conv2d("c3", 16, 5, 5, activation="tanh", dim_ordering="tf"),  # 10
        pool2d("MaxPooling2D", "s4", (2, 2), dim_ordering="tf"),  # 5
        flatten("flatten_1"),
        dense("f5", 120, 400, activation="tanh"),
        dense("out", 10, 120, activation="softmax"),
    ]
    S["k1_functional"] = dict(
        layers=fn,
        input_shape=(28, 28, 1),
        ordering="tf",
        backend="tensorflow",
        kind="full",
        keras_version="1.2.2",
        compiled=True,
        seed=22,
        functional="image",
    )

    left = [dense("dense_1", 32, 784, activation="relu", first=True)]
    right = [dense("dense_2", 32, 784, activation="tanh", first=True)]
    after = [dense("dense_3", 10, 64, activation="softmax")]
    S["k1_merge"] = dict(
        layers=after,
        merge=[left, right],
        input_shape=(784,),
        ordering="",
        backend="tensorflow",
        kind="full",
        keras_version="1.2.2",
        compiled=True,
        seed=23,
    )

    for spec in S.values():
        # Before 1.2.0, Dense.build() did not store the built input_dim: the config keeps the
        # constructor's value (null unless input_dim= was given), e.g. keras-js mnist_cnn.json (1.0.7).
        version = spec.get("json_version", spec["keras_version"]) or "1.0.0"
        if tuple(int(p) for p in version.split(".")) < (1, 2, 0):
            for L in spec["layers"]:
                if L["class_name"] == "Dense" and "batch_input_shape" not in L["config"]:
                    L["config"]["input_dim"] = None
    return S


def _model_config(spec):
    """{'class_name', 'config'} as save_model writes it (to_json adds keras_version)."""
    if spec.get("functional"):
        iname = spec["functional"]
        layers = [
            dict(
                name=iname,
                class_name="InputLayer",
                config=input_layer(iname, spec["input_shape"])["config"],
                inbound_nodes=[],
            )
        ]
        prev = iname
        for L in spec["layers"]:
            layers.append(
                {
                    "name": L["config"]["name"],
                    "class_name": L["class_name"],
                    "config": L["config"],
                    "inbound_nodes": [[[prev, 0, 0]]],
                }
            )
            prev = L["config"]["name"]
        return {
            "class_name": "Model",
            "config": {
                "name": "model_1",
                "layers": layers,
                "input_layers": [[iname, 0, 0]],
                "output_layers": [[prev, 0, 0]],
            },
        }
    if spec.get("merge"):
        merge = {
            "name": "merge_1",
            "mode": "concat",
            "mode_type": "raw",
            "concat_axis": -1,
            "dot_axes": -1,
            "output_shape": None,
            "output_shape_type": "raw",
            "output_mask": None,
            "output_mask_type": "raw",
            "arguments": {},
            "layers": [{"class_name": "Sequential", "config": b} for b in spec["merge"]],
        }
        return {"class_name": "Sequential", "config": [{"class_name": "Merge", "config": merge}] + spec["layers"]}
    return {"class_name": "Sequential", "config": spec["layers"]}


def _layer_names(spec):
    """Sequential.flattened_layers (models.py): a Merge contributes its branches' layers, not itself;
    Model.layers includes the InputLayer."""
    names = []
    if spec.get("functional"):
        names.append(spec["functional"])
    for b in spec.get("merge", []):
        names += [L["config"]["name"] for L in b]
    names += [L["config"]["name"] for L in spec["layers"]]
    return names


def _convert_kernel(kernel):
    """Keras 2's conv_utils.convert_kernel (Keras 2.0-2.3, applied by its loader to the
    kernels of a file whose recorded backend was Theano): every axis but the last two
    (input and output channels) reversed. tf_keras no longer has it."""
    return np.copy(kernel[(slice(None, None, -1),) * (kernel.ndim - 2)])


def _keras2_layers(layers, input_shape):
    """The Keras 2 (tf_keras) layers a user writes for a Keras 1 Sequential config."""
    import tf_keras

    KL = tf_keras.layers
    out = []
    for i, L in enumerate(layers):
        cn, c = L["class_name"], L["config"]
        first = {"input_shape": tuple(input_shape)} if i == 0 else {}
        if cn == "Convolution2D":
            fmt = "channels_first" if c["dim_ordering"] == "th" else "channels_last"
            out.append(
                KL.Conv2D(
                    c["nb_filter"],
                    (c["nb_row"], c["nb_col"]),
                    strides=tuple(c["subsample"]),
                    padding=c["border_mode"],
                    data_format=fmt,
                    activation=c["activation"],
                    use_bias=c["bias"],
                    **first,
                )
            )
        elif cn == "MaxPooling2D":
            fmt = "channels_first" if c["dim_ordering"] == "th" else "channels_last"
            out.append(
                KL.MaxPooling2D(
                    tuple(c["pool_size"]), strides=tuple(c["strides"]), padding=c["border_mode"], data_format=fmt
                )
            )
        elif cn == "Dropout":
            out.append(KL.Dropout(c["p"]))
        elif cn == "Flatten":
            out.append(KL.Flatten(data_format="channels_last"))  # C order of the tensor held: Keras 1's
        elif cn == "Dense":
            out.append(KL.Dense(c["output_dim"], activation=c["activation"], use_bias=c["bias"], **first))
        elif cn == "Activation":
            out.append(KL.Activation(c["activation"]))
        else:
            raise NotImplementedError(cn)
    return out


def _keras2_arch(spec, h5, x, expected):
    """A Keras 2 architecture (tf_keras model.to_json()) for a Keras 1 weights file, and
    tf_keras' own loading of the file into it: its output must be ``expected``."""
    import tf_keras
    from keras_fixtures import keras_predict

    model = tf_keras.Sequential(_keras2_layers(spec["layers"], spec["input_shape"]))
    arch = model.to_json()
    model = tf_keras.models.model_from_json(arch)
    model.load_weights(str(h5))  # tf_keras' preprocess_weights_for_loading: the 'th' transposes
    if spec["backend"] == "theano":  # recorded by a Keras 2 file only; Keras 1 files say it by their names
        for layer in model.layers:
            if isinstance(layer, tf_keras.layers.Conv2D):
                layer.set_weights([_convert_kernel(layer.get_weights()[0])] + layer.get_weights()[1:])
    got = keras_predict(model, x)  # through XLA: the model is channels_first (keras_predict says why)
    diff = float(np.abs(got.astype(np.float64) - expected).max())
    assert diff <= TOLERANCE, f"tf_keras' loading of the Keras 1 weights differs from Keras 1's model by {diff:.3g}"
    return arch


def _load_inputs(input_shape):
    img = MNIST_DIR / "t10k-images-idx3-ubyte.gz"
    if img.is_file():
        from lenet.bench.workload import read_idx

        x = read_idx(img)[:N_SAMPLES].reshape(-1).astype(np.float32) / 255.0
        src = "MNIST test digits 0..63 / 255"
    else:
        x = np.random.default_rng(0).random(N_SAMPLES * 784, dtype=np.float32)
        src = "uniform random [0, 1) (MNIST not found)"
    return x.reshape((N_SAMPLES,) + tuple(input_shape)).astype(np.float32), src


def _trap_diffs(spec, x, ref):
    """How far a wrong reading of the file lands (float64 reference)."""
    out = {}
    has_conv = any(L["class_name"] == "Convolution2D" for L in spec["layers"])
    other = "TensorFlow" if spec["backend"] == "theano" else "Theano"
    if has_conv:
        out[f"kernels flipped as if {other} wrote them"] = float(
            np.abs(_numpy_forward(spec, x, {"flip_toggle": True}) - ref).max()
        )
    if any(L["config"].get("border_mode") == "same" for L in spec["layers"]):
        out[f"{other}'s 'same' padding"] = float(np.abs(_numpy_forward(spec, x, {"same_toggle": True}) - ref).max())
    if spec["ordering"] == "th" and has_conv:
        out["Dense rows read as H,W,C"] = float(np.abs(_numpy_forward(spec, x, {"hwc_flatten": True}) - ref).max())
    if any(L["class_name"] == "BatchNormalization" for L in spec["layers"]):
        out["running_std read with the other BN formula"] = float(
            np.abs(_numpy_forward(spec, x, {"bn_swap": True}) - ref).max()
        )
    return {k: v for k, v in out.items() if v > 1e-6}


def build_keras1(directory: Path, only=None) -> dict[str, Keras1File]:
    """Writes the Keras 1 files of CASES (or of the names in `only`) into `directory`,
    with the expected outputs. Raises AssertionError when the Keras 3 model and the
    float64 numpy reference disagree by more than TOLERANCE."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specs = _specs()
    names = list(CASES) if only is None else [n for n in CASES if n in set(only)]
    unknown = set(only or ()) - set(CASES)
    if unknown:
        raise KeyError(f"no such Keras 1 case: {sorted(unknown)}")
    result = {}
    for name in names:
        spec = specs[name]
        rng = np.random.default_rng(spec["seed"])
        weights = {}
        if spec.get("merge"):
            for b in spec["merge"]:
                weights.update(_make_weights(b, spec["input_shape"], spec["ordering"], rng))
            merged = sum(_infer_shapes(b, spec["input_shape"], spec["ordering"])[-1][0] for b in spec["merge"])
            weights.update(_make_weights(spec["layers"], (merged,), spec["ordering"], rng))
        else:
            weights = _make_weights(
                spec["layers"], spec["input_shape"], spec["ordering"], rng, bn_std=spec.get("bn_std", False)
            )
        spec["weights"] = weights
        x, src = _load_inputs(spec["input_shape"])

        ref = _numpy_forward(spec, x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = _keras3_predict(spec, x)
        diff = float(np.abs(expected.astype(np.float64) - ref).max())
        assert diff <= TOLERANCE, f"{name}: Keras 3 and the numpy reference differ by {diff:.3g}"

        mc = _model_config(spec)
        lnames = _layer_names(spec)
        h5 = directory / f"{name}.h5"
        arch = None
        if spec["kind"] == "full":
            opt_shapes = None
            if spec.get("compiled"):
                params = [
                    w.shape for n in lnames for suffix, w in weights.get(n, []) if not suffix.startswith("running_")
                ]  # trainable weights only
                opt_shapes = params + params  # Adadelta: accumulators + delta_accumulators
            write_full_model(
                h5,
                mc,
                lnames,
                weights,
                spec["backend"],
                spec["keras_version"],
                adadelta_training_config() if spec.get("compiled") else None,
                opt_shapes,
            )
        else:
            write_weights_only(h5, lnames, weights, spec["backend"])
            j = dict(mc)
            jv = spec.get("json_version", spec["keras_version"])
            if jv is not None:
                j["keras_version"] = jv
            j.update(spec.get("json_extra", {}))
            arch = directory / f"{name}.json"
            arch.write_text(_keras2_arch(spec, h5, x, expected) if spec.get("k2arch") else json.dumps(j))

        traps = _trap_diffs(spec, x, ref)
        notes = CASES[name] + f". Inputs: {src}."
        if traps:
            notes += " Wrong readings: " + "; ".join(f"{k} -> max diff {v:.3g}" for k, v in traps.items()) + "."
        result[name] = Keras1File(
            name=name,
            path=h5,
            arch=arch,
            input_shape=tuple(spec["input_shape"]),
            x=x,
            expected=expected.astype(np.float32),
            notes=notes,
            keras_version=spec["keras_version"],
            backend=spec["backend"],
            dim_ordering=spec["ordering"],
            kind=spec["kind"],
            max_abs_diff_numpy=diff,
            traps=traps,
        )
    return result


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        out = Path(argv[0])
    else:
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="keras1_files_"))
    t0 = time.perf_counter()
    files = build_keras1(out)
    dt = time.perf_counter() - t0
    print(
        f"{'name':24} {'kind':7} {'ver':6} {'backend':10} {'ord':3} {'input':12} {'out':8} "
        f"{'|k3-np|':8} {'KiB':>6}  traps"
    )
    for f in files.values():
        kib = f.path.stat().st_size / 1024
        traps = ", ".join(f"{k}: {v:.2g}" for k, v in f.traps.items())
        print(
            f"{f.name:24} {f.kind:7} {f.keras_version:6} {f.backend:10} {f.dim_ordering or '-':3} "
            f"{str(f.input_shape):12} {str(f.expected.shape[1:]):8} {f.max_abs_diff_numpy:<8.1e} {kib:6.0f}  "
            f"{traps}"
        )
    print(f"{len(files)} files in {out} ({dt:.1f} s)")


if __name__ == "__main__":
    main()
