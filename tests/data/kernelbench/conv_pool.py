import torch
import torch.nn as nn


class Model(nn.Module):
    """A 3x3 convolution without padding, then 2x2 max pooling, then a scale and a second output."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor, scale: float):
        y = self.conv(x)
        return self.pool(y) * scale, y.mean()


batch_size = 8
in_channels = 3
out_channels = 16
kernel_size = 3
height = 64
width = 48


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width), 0.5]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
