"""What the zoo's step scripts share: a nuScenes-like camera rig for synthetic batches,
and one optimizer step reported as the JSON line the tests read.

Imported by the scripts of this folder (their folder is on ``sys.path`` when they run
as scripts); standard library, NumPy and torch only.
"""
import json
import math

import numpy as np
import torch


def lidar_to_image(yaw, height, width, focal=80.0):
    """A 4x4 lidar-to-image projection of a camera looking along ``yaw``, 1.6 m above
    the lidar, with its principal point in the middle of a ``height`` x ``width`` image."""
    return intrinsics(height, width, focal) @ lidar_to_camera(yaw)


def intrinsics(height, width, focal=80.0):
    """The 4x4 intrinsic matrix of the rig's cameras."""
    return np.array([[focal, 0, width / 2, 0], [0, focal, height / 2, 0],
                     [0, 0, 1, 0], [0, 0, 0, 1]])


def lidar_to_camera(yaw):
    """The 4x4 extrinsic matrix of a camera looking along ``yaw`` (lidar: x forward,
    y left, z up; camera: x right, y down, z forward)."""
    cos, sin = math.cos(yaw), math.sin(yaw)
    forward, right, down = np.array([cos, sin, 0]), np.array([sin, -cos, 0]), np.array([0, 0, -1])
    extrinsics = np.eye(4)
    extrinsics[:3, :3] = np.stack([right, down, forward])
    extrinsics[:3, 3] = -extrinsics[:3, :3] @ np.array([0.0, 0.0, 1.6])
    return extrinsics


def train_one_step(model, batch, optimizer):
    """The model's own ``train_step`` on ``batch``, backward and one optimizer step;
    prints the JSON line the tests judge (losses, parameters left without a gradient,
    how far the weights moved)."""
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    outputs = model.train_step(batch, optimizer)
    optimizer.zero_grad()
    outputs["loss"].backward()
    trainable = [(name, parameter) for name, parameter in model.named_parameters()
                 if parameter.requires_grad]
    without_gradient = [name for name, parameter in trainable if parameter.grad is None]
    optimizer.step()
    moved = sum(float((parameter.detach() - before[name]).abs().sum())
                for name, parameter in trainable)
    loss = float(outputs["loss"].detach())
    print(json.dumps({"loss": loss, "log_vars": outputs["log_vars"],
                      "trainable": len(trainable), "without_gradient": without_gradient,
                      "moved": moved, "finite": math.isfinite(loss)}))


def seeded():
    """Seed torch and NumPy (the models' grid masks draw from NumPy)."""
    torch.manual_seed(0)
    np.random.seed(0)
