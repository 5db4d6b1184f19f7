#!/usr/bin/env python3
"""Exports a diffusers model (and its ControlNets) to the ONNX layout native/ loads (docs/models.md).

Operator tool, run on a machine with PyPI and the Hugging Face Hub. NOT RUN in development or CI
(neither torch nor the Hub is reachable there), so it is unverified: check a first export with
`reverie` on the tiny path (`status().providers`, a frame through WHIP) before relying on it.

    pip install torch diffusers transformers onnx
    # base model: text encoder, UNet with a [batch] timestep (+ ControlNet residual inputs), VAE pair
    python native/export/export_model.py base stabilityai/sd-turbo models/stabilityai/sd-turbo \
        --taesd madebyollin/taesd --controlnet-residuals
    # one ControlNet of that family, to models/controlnet/<id>/model.onnx
    python native/export/export_model.py controlnet thibaud/controlnet-sd21-canny-diffusers models \
        --base stabilityai/sd-turbo

The I/O contract it writes is the one ModelSessions.ts and ControlNet.ts check at load:
  text_encoder  input_ids int64 [B,77] -> last_hidden_state [B,77,D], pooler_output [B,D]
  unet          sample [B,4,h,w], timestep float32 [B], encoder_hidden_states [B,77,D]
                (+ down_block_additional_residual_<i>, mid_block_additional_residual) -> out_sample
  vae_encoder   sample [B,3,H,W] in [-1,1] -> latent_sample (TAESD) or latent_parameters (KL: mean || logvar)
  vae_decoder   latent_sample [B,4,h,w] -> sample [B,3,H,W] in [-1,1]
  controlnet    sample, timestep [B], encoder_hidden_states, controlnet_cond [B,3,H,W] in [0,1],
                conditioning_scale float32 [] -> down_block_res_sample_<i>, mid_block_res_sample
SDXL (added text/time embeddings, a second text encoder) is refused: the engine does not feed those yet.
"""
import argparse
import json
import os
import shutil
import sys

import onnx
import torch

OPSET = 17
# Models above protobuf's 2 GB limit keep their weights beside the graph, in one file.
WEIGHTS_FILE = "weights.pb"


def save_onnx(path, export):
    """Runs `export(tmp_path)` (a torch.onnx.export call), then re-saves the model as one file, or,
    above protobuf's 2 GB limit (an fp32 SD UNet is 3.4 GB), with its weights in one file beside it
    (torch writes one file per tensor there). Keep what fits inline: the runtime's LoRA merge and
    VAE rewrite read inline weights only (an fp16 export of an SD 1.x/2.x UNet fits)."""
    tmp_dir = path + ".tmp"
    os.makedirs(tmp_dir, exist_ok=True)
    tmp = os.path.join(tmp_dir, "model.onnx")
    export(tmp)
    model = onnx.load(tmp, load_external_data=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    external = sum(t.ByteSize() for t in model.graph.initializer) > 1_900_000_000
    onnx.save_model(model, path, save_as_external_data=external, all_tensors_to_one_file=True, location=WEIGHTS_FILE)
    shutil.rmtree(tmp_dir)


def residual_shapes(unet_config):
    """(channels, factor) of each down residual then mid, as ModelSessions.residualInputsOf reads them
    from unet/config.json: conv_in, `layers_per_block` per block plus a downsampler on all but the
    last block, then mid."""
    blocks = unet_config["block_out_channels"]
    layers = unet_config.get("layers_per_block", 2)
    out = [(blocks[0], 1)]
    for i, ch in enumerate(blocks):
        out += [(ch, 2**i)] * layers
        if i < len(blocks) - 1:
            out.append((ch, 2 ** (i + 1)))
    mid = (blocks[-1], 2 ** (len(blocks) - 1))
    return out, mid


class UNetWrap(torch.nn.Module):
    def __init__(self, unet, with_residuals):
        super().__init__()
        self.unet = unet
        self.with_residuals = with_residuals

    def forward(self, sample, timestep, encoder_hidden_states, *residuals):
        kw = {}
        if self.with_residuals:
            kw = {"down_block_additional_residuals": list(residuals[:-1]), "mid_block_additional_residual": residuals[-1]}
        return self.unet(sample, timestep, encoder_hidden_states, return_dict=False, **kw)[0]


class TextWrap(torch.nn.Module):
    def __init__(self, text_encoder):
        super().__init__()
        self.text_encoder = text_encoder

    def forward(self, input_ids):
        out = self.text_encoder(input_ids, return_dict=False)
        return out[0], out[1]


class TinyEncoderWrap(torch.nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, sample):
        return self.vae.encode(sample).latents


class KlEncoderWrap(torch.nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, sample):
        # mean || logvar: the runtime takes the mean (deterministic img2img, as StreamDiffusion does).
        return self.vae.encode(sample).latent_dist.parameters


class DecoderWrap(torch.nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, latent_sample):
        return self.vae.decode(latent_sample, return_dict=False)[0]


class ControlNetWrap(torch.nn.Module):
    def __init__(self, controlnet):
        super().__init__()
        self.controlnet = controlnet

    def forward(self, sample, timestep, encoder_hidden_states, controlnet_cond, conditioning_scale):
        down, mid = self.controlnet(sample, timestep, encoder_hidden_states, controlnet_cond, conditioning_scale=conditioning_scale, return_dict=False)
        return (*down, mid)


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, indent=2)


def export_base(a):
    from diffusers import AutoencoderTiny, DiffusionPipeline

    dtype = torch.float16 if a.fp16 else torch.float32
    pipe = DiffusionPipeline.from_pretrained(a.model_id, torch_dtype=dtype)
    unet = pipe.unet.to(a.device).eval()
    if getattr(unet.config, "addition_embed_type", None) == "text_time":
        sys.exit(f"{a.model_id} is an SDXL-family model: the engine does not feed text_embeds/time_ids yet")
    out = a.out_dir
    size, lat = a.size, a.size // 8
    d = pipe.text_encoder.config.hidden_size
    seq = pipe.tokenizer.model_max_length
    batch = {0: "batch"}

    with torch.no_grad():
        ids = torch.zeros((1, seq), dtype=torch.int64, device=a.device)
        te = TextWrap(pipe.text_encoder.to(a.device).eval())
        save_onnx(os.path.join(out, "text_encoder", "model.onnx"), lambda p: torch.onnx.export(
            te, (ids,), p, opset_version=OPSET, input_names=["input_ids"], output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes={"input_ids": batch, "last_hidden_state": batch, "pooler_output": batch}))

        # timestep shaped [batch] (Stream Batch runs one timestep per slot), float32.
        sample = torch.randn((2, unet.config.in_channels, lat, lat), dtype=dtype, device=a.device)
        ts = torch.tensor([500.0, 250.0], dtype=torch.float32, device=a.device)
        ehs = torch.randn((2, seq, d), dtype=dtype, device=a.device)
        names = ["sample", "timestep", "encoder_hidden_states"]
        args = [sample, ts, ehs]
        axes = {"sample": {0: "batch", 2: "height", 3: "width"}, "timestep": batch, "encoder_hidden_states": batch, "out_sample": {0: "batch", 2: "height", 3: "width"}}
        if a.controlnet_residuals:
            downs, (mid_ch, mid_f) = residual_shapes(unet.config)
            for i, (ch, f) in enumerate(downs):
                n = f"down_block_additional_residual_{i}"
                names.append(n)
                args.append(torch.zeros((2, ch, -(-lat // f), -(-lat // f)), dtype=dtype, device=a.device))
                axes[n] = {0: "batch", 2: f"h{i}", 3: f"w{i}"}
            names.append("mid_block_additional_residual")
            args.append(torch.zeros((2, mid_ch, -(-lat // mid_f), -(-lat // mid_f)), dtype=dtype, device=a.device))
            axes["mid_block_additional_residual"] = {0: "batch", 2: "hm", 3: "wm"}
        uw = UNetWrap(unet, a.controlnet_residuals)
        save_onnx(os.path.join(out, "unet", "model.onnx"), lambda p: torch.onnx.export(
            uw, tuple(args), p, opset_version=OPSET, input_names=names, output_names=["out_sample"], dynamic_axes=axes))
        write_json(os.path.join(out, "unet", "config.json"), dict(unet.config))

        if a.taesd:
            vae = AutoencoderTiny.from_pretrained(a.taesd, torch_dtype=dtype).to(a.device).eval()
            enc, enc_out, scaling = TinyEncoderWrap(vae), "latent_sample", 1.0
        else:
            vae = pipe.vae.to(a.device).eval()
            enc, enc_out, scaling = KlEncoderWrap(vae), "latent_parameters", float(vae.config.scaling_factor)
        img = torch.rand((1, 3, size, size), dtype=dtype, device=a.device) * 2 - 1
        spatial = {0: "batch", 2: "height", 3: "width"}
        save_onnx(os.path.join(out, "vae_encoder", "model.onnx"), lambda p: torch.onnx.export(
            enc, (img,), p, opset_version=OPSET, input_names=["sample"], output_names=[enc_out], dynamic_axes={"sample": spatial, enc_out: spatial}))
        latent = torch.randn((1, 4, lat, lat), dtype=dtype, device=a.device)
        save_onnx(os.path.join(out, "vae_decoder", "model.onnx"), lambda p: torch.onnx.export(
            DecoderWrap(vae), (latent,), p, opset_version=OPSET, input_names=["latent_sample"], output_names=["sample"],
            dynamic_axes={"latent_sample": spatial, "sample": spatial}))
        for part in ("vae_encoder", "vae_decoder"):
            write_json(os.path.join(out, part, "config.json"), {"scaling_factor": scaling})

    pipe.tokenizer.save_pretrained(os.path.join(out, "tokenizer"))
    write_json(os.path.join(out, "scheduler", "scheduler_config.json"), dict(pipe.scheduler.config))
    write_json(os.path.join(out, "model_index.json"), {"_class_name": type(pipe).__name__, "_exported_from": a.model_id, "_taesd": a.taesd or None})
    print(f"wrote {out}")


def export_controlnet(a):
    from diffusers import ControlNetModel, UNet2DConditionModel

    dtype = torch.float16 if a.fp16 else torch.float32
    cn = ControlNetModel.from_pretrained(a.controlnet_id, torch_dtype=dtype).to(a.device).eval()
    unet_cfg = UNet2DConditionModel.load_config(a.base, subfolder="unet")
    if isinstance(cn.config.cross_attention_dim, int) and cn.config.cross_attention_dim != unet_cfg["cross_attention_dim"]:
        sys.exit(f"{a.controlnet_id} has cross_attention_dim {cn.config.cross_attention_dim}, {a.base} {unet_cfg['cross_attention_dim']}")
    size, lat = a.size, a.size // 8
    d = unet_cfg["cross_attention_dim"]
    sample = torch.randn((2, 4, lat, lat), dtype=dtype, device=a.device)
    ts = torch.tensor([500.0, 250.0], dtype=torch.float32, device=a.device)
    ehs = torch.randn((2, 77, d), dtype=dtype, device=a.device)
    cond = torch.rand((2, 3, size, size), dtype=dtype, device=a.device)
    scale = torch.tensor(1.0, dtype=dtype, device=a.device)
    downs, _ = residual_shapes(unet_cfg)
    outs = [f"down_block_res_sample_{i}" for i in range(len(downs))] + ["mid_block_res_sample"]
    axes = {"sample": {0: "batch", 2: "height", 3: "width"}, "timestep": {0: "batch"}, "encoder_hidden_states": {0: "batch"},
            "controlnet_cond": {0: "batch", 2: "image_height", 3: "image_width"}}
    axes.update({n: {0: "batch", 2: f"h{i}", 3: f"w{i}"} for i, n in enumerate(outs)})
    path = os.path.join(a.models_dir, "controlnet", *a.controlnet_id.split("/"), "model.onnx")
    with torch.no_grad():
        save_onnx(path, lambda p: torch.onnx.export(
            ControlNetWrap(cn), (sample, ts, ehs, cond, scale), p, opset_version=OPSET,
            input_names=["sample", "timestep", "encoder_hidden_states", "controlnet_cond", "conditioning_scale"], output_names=outs, dynamic_axes=axes))
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("base", help="text encoder, UNet, VAE pair, tokenizer and configs of one model_id")
    b.add_argument("model_id")
    b.add_argument("out_dir")
    b.add_argument("--taesd", help="export this AutoencoderTiny (madebyollin/taesd) as the VAE pair, as StreamDiffusion runs")
    b.add_argument("--controlnet-residuals", action="store_true", help="give the UNet ControlNet residual inputs (needed for controlnets)")
    c = sub.add_parser("controlnet", help="one ControlNet, to <models_dir>/controlnet/<id>/model.onnx")
    c.add_argument("controlnet_id")
    c.add_argument("models_dir")
    c.add_argument("--base", required=True, help="the base model id whose UNet config the residuals must match")
    for p in (b, c):
        p.add_argument("--size", type=int, default=512, help="trace size in pixels (axes stay dynamic); default 512")
        p.add_argument("--fp16", action="store_true", help="export half-precision weights (GPU serving)")
        p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    export_base(a) if a.cmd == "base" else export_controlnet(a)


if __name__ == "__main__":
    main()
