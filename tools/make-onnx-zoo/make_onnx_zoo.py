"""Writes tests/data/onnx/: ONNX files of typical PyTorch MNIST nets, exported by
torch.onnx.export (the TorchScript exporter, as most files in the wild were written),
each with seeded random weights and batch-norm statistics like trained ones.

    pip install torch==2.13.0     # a CPU build; torch is never a test or run-time dependency
    python tools/make-onnx-zoo/make_onnx_zoo.py [OUT_DIR]

The files are small (slimmer widths than the originals where those hold megabytes);
tests/models/test_onnx.py runs each against ONNX Runtime. Re-running rewrites them identically
for a given torch version.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "tests" / "data" / "onnx"


class ExampleNet(nn.Module):
    """pytorch/examples mnist/main.py (conv 32, 64; fc 9216 -> 128), at a quarter of the widths."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(2304, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


class LeNet5(nn.Module):
    """LeNet-5 as tutorials write it: 28x28 padded by the first conv, tanh or ReLU, average or max pooling."""

    def __init__(self, act=nn.Tanh, pool=nn.AvgPool2d, size=28):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2 if size == 28 else 0),
            act(),
            pool(2, 2),
            nn.Conv2d(6, 16, 5),
            act(),
            pool(2, 2),
        )
        self.classifier = nn.Sequential(nn.Linear(400, 120), act(), nn.Linear(120, 84), act(), nn.Linear(84, 10))

    def forward(self, x):
        return self.classifier(self.features(x).view(x.size(0), -1))


class MLP(nn.Module):
    def __init__(self, act=nn.ReLU, flat_input=False):
        super().__init__()
        self.flat_input = flat_input
        self.net = nn.Sequential(
            nn.Linear(784, 128), act(), nn.Dropout(0.2), nn.Linear(128, 64), act(), nn.Linear(64, 10)
        )

    def forward(self, x):
        return self.net(x if self.flat_input else x.view(-1, 784))


class BNNet(nn.Module):
    """Conv(bias=False) -> BatchNorm -> ReLU blocks, a BatchNorm1d head, softmax out; normalisation in the graph."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 6 * 6, 64),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, x):
        return F.softmax(self.body((x - 0.1307) / 0.3081), dim=1)


class GapNet(nn.Module):
    """Global average pooling head, LeakyReLU, ReLU6, a residual Add and a channel Concat."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = nn.Conv2d(16, 10, 1)

    def forward(self, x):
        a = F.leaky_relu(self.c1(x), 0.1)
        b = F.relu6(self.c2(a)) + a
        y = self.c3(torch.cat([a, b], 1))
        return F.adaptive_avg_pool2d(y, 1).flatten(1)


class GeluMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.GELU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class TwoOutputs(nn.Module):
    """Features beside the class scores (a second output)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(576, 32), nn.ReLU()
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        f = self.features(x)
        return self.head(f), f


class NoBatch(nn.Module):
    """Takes one (1, 28, 28) image, no batch axis."""

    def __init__(self):
        super().__init__()
        self.net = LeNet5(act=nn.ReLU, pool=nn.MaxPool2d)

    def forward(self, x):
        return self.net(x.unsqueeze(0)).squeeze(0)


class GreyRGB(nn.Module):
    """A 3-channel 32x32 input (grey digits fed as three identical channels)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 6, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(400, 10),
        )

    def forward(self, x):
        return self.net(x)


def trained_like(model: nn.Module, seed: int) -> nn.Module:
    """Seeded weights; batch-norm statistics from a pass over random digits-like inputs."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        scale = 0.1 if p.dim() == 1 else (1.0 / p[0].numel()) ** 0.5  # biases, BN affine; He-like kernels
        with torch.no_grad():
            p.copy_(
                torch.randn(p.shape, generator=g) * scale + (1.0 if name.endswith(".weight") and p.dim() == 1 else 0.0)
            )
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        model.train()
        with torch.no_grad():
            for _ in range(20):
                model(torch.rand((64, 1, 28, 28), generator=g))
    return model.eval()


# name -> (model, example input, opset, dynamic batch)
CASES = {
    "example_net": (ExampleNet(), (1, 1, 28, 28), 13, True),
    "example_net_opset9": (ExampleNet(), (1, 1, 28, 28), 9, True),
    "lenet5_tanh_avg": (LeNet5(), (1, 1, 28, 28), 11, True),
    "lenet5_relu_max_32": (LeNet5(nn.ReLU, nn.MaxPool2d, 32), (1, 1, 32, 32), 17, True),
    "mlp": (MLP(), (1, 1, 28, 28), 13, True),
    "mlp_flat_fixed_batch": (MLP(nn.Tanh, flat_input=True), (8, 784), 12, False),
    "bn_cnn": (BNNet(), (1, 1, 28, 28), 13, True),
    "gap_residual": (GapNet(), (1, 1, 28, 28), 14, True),
    "gelu_mlp": (GeluMLP(), (1, 1, 28, 28), 13, True),
    "two_outputs": (TwoOutputs(), (1, 1, 28, 28), 13, True),
    "no_batch_axis": (NoBatch(), (1, 28, 28), 13, False),
    "grey_rgb_32": (GreyRGB(), (1, 3, 32, 32), 18, True),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for i, (name, (model, shape, opset, dynamic)) in enumerate(CASES.items()):
        trained_like(model, seed=100 + i)
        x = torch.rand(shape, generator=torch.Generator().manual_seed(i))
        outs = ["scores", "features"] if name == "two_outputs" else ["scores"]
        axes = {"image": {0: "batch"}, **{o: {0: "batch"} for o in outs}} if dynamic else None
        path = OUT / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (x,),
                str(path),
                input_names=["image"],
                output_names=outs,
                opset_version=opset,
                dynamic_axes=axes,
                dynamo=False,
                do_constant_folding=True,
            )
        print(f"{path.name:28} opset {opset:2}  {path.stat().st_size / 1024:6.1f} KiB")


if __name__ == "__main__":
    main()
