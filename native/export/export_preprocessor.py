#!/usr/bin/env python3
"""Exports the networks behind the model-backed ControlNet preprocessors to the ONNX contract
native/preprocessors/PreprocessorModel.ts checks (docs/models.md "ControlNet preprocessors").

Operator tool, run on a machine with PyPI and the Hugging Face Hub. NOT RUN in development or CI
(neither torch nor the Hub is reachable there), so it is unverified: check a first export with the
preprocessor test on the real file (status().preprocessors says demo: false) before relying on it.

    pip install torch transformers controlnet_aux onnx
    python native/export/export_preprocessor.py depth_tensorrt models   # Depth Anything V2 small
    python native/export/export_preprocessor.py pose_tensorrt  models   # OpenPose body (lllyasviel/Annotators)
    python native/export/export_preprocessor.py soft_edge      models   # HED (lllyasviel/Annotators)

Each writes <models_dir>/preprocessors/<folder>/model.onnx and a config.json without "_demo"
(a real export, which the demo builder never overwrites). Contract (batch and spatial axes dynamic):
  depth-anything-v2-small  pixel_values [B,3,H,W] ImageNet-normalised, H,W multiples of 14
                           -> predicted_depth [B,H,W] (relative inverse depth)
  openpose-body            image [B,3,H,W] RGB as x/256 - 0.5, H,W multiples of 8
                           -> paf [B,38,H/8,W/8], heatmap [B,19,H/8,W/8]
  hed                      image [B,3,H,W] RGB in [0,255] -> edges [B,1,H,W] in [0,1] (sigmoid of the fused map)
TensorRT engines for the *_tensorrt names are built by onnxruntime's TensorRT EP from these files
(engine cache beside the model); nothing TensorRT-specific is exported here.
"""
import argparse
import json
import os

import torch

OPSET = 17
FOLDERS = {"depth_tensorrt": "depth-anything-v2-small", "pose_tensorrt": "openpose-body", "soft_edge": "hed"}


class DepthWrap(torch.nn.Module):
    """transformers' DepthAnythingForDepthEstimation, returning the tensor alone."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).predicted_depth


class OpenPoseWrap(torch.nn.Module):
    """controlnet_aux's body_pose_model: the last stage's PAFs (38) and heatmaps (19)."""

    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, image):
        paf, heatmap = self.body(image)
        return paf, heatmap


class HedWrap(torch.nn.Module):
    """controlnet_aux's ControlNetHED_Apache2: the five side outputs upsampled to the input size,
    averaged and squashed with a sigmoid, as HEDdetector does before its (optional) safe step."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, image):
        h, w = image.shape[2], image.shape[3]
        edges = self.net(image)
        edges = [torch.nn.functional.interpolate(e, size=(h, w), mode="bilinear", align_corners=False) for e in edges]
        return torch.sigmoid(torch.stack(edges, dim=0).mean(dim=0))


def export(a):
    folder = os.path.join(a.models_dir, "preprocessors", FOLDERS[a.name])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    if a.name == "depth_tensorrt":
        from transformers import AutoModelForDepthEstimation

        model = DepthWrap(AutoModelForDepthEstimation.from_pretrained(a.depth_model)).eval()
        x = torch.randn(1, 3, 518, 518)
        names, outs = ["pixel_values"], ["predicted_depth"]
        axes = {"pixel_values": {0: "batch", 2: "height", 3: "width"}, "predicted_depth": {0: "batch", 1: "height", 2: "width"}}
        source = a.depth_model
    elif a.name == "pose_tensorrt":
        from controlnet_aux import OpenposeDetector

        det = OpenposeDetector.from_pretrained(a.annotators)
        model = OpenPoseWrap(det.body_estimation.model).eval()
        x = torch.randn(1, 3, 368, 368)
        names, outs = ["image"], ["paf", "heatmap"]
        axes = {"image": {0: "batch", 2: "height", 3: "width"}, "paf": {0: "batch", 2: "grid_height", 3: "grid_width"}, "heatmap": {0: "batch", 2: "grid_height", 3: "grid_width"}}
        source = f"{a.annotators} body_pose_model.pth"
    else:
        from controlnet_aux import HEDdetector

        det = HEDdetector.from_pretrained(a.annotators)
        model = HedWrap(det.netNetwork).eval()
        x = torch.rand(1, 3, 512, 512) * 255
        names, outs = ["image"], ["edges"]
        axes = {"image": {0: "batch", 2: "height", 3: "width"}, "edges": {0: "batch", 2: "height", 3: "width"}}
        source = f"{a.annotators} ControlNetHED.pth"
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, opset_version=OPSET, input_names=names, output_names=outs, dynamic_axes=axes)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"preprocessor": a.name, "source": source, "opset": OPSET}, f, indent=2)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=sorted(FOLDERS))
    ap.add_argument("models_dir")
    ap.add_argument("--depth-model", default="depth-anything/Depth-Anything-V2-Small-hf")
    ap.add_argument("--annotators", default="lllyasviel/Annotators")
    export(ap.parse_args())


if __name__ == "__main__":
    main()
