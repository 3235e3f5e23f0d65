"""Write docs/examples/llama-3.1-8b.gguf: a metadata-only GGUF with the values convert_hf_to_gguf.py writes for
Llama 3.1 8B Instruct (no weights), including the rope_freqs tensor of llama3 factors baked at conversion.

    python docs/examples/write_gguf.py
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from posenc_cli.rope.frequencies import RopeSpec, compute

HERE = Path(__file__).resolve().parent
params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
freqs = compute(RopeSpec(params, 128, 131072))
# the converter stores, per pair, how much llama3 divides the plain frequency
factors = (freqs.base_inv_freq / freqs.inv_freq).astype(np.float32)

writer = gguf.GGUFWriter(str(HERE / "llama-3.1-8b.gguf"), "llama")
writer.add_name("Meta Llama 3.1 8B Instruct (metadata only)")
writer.add_context_length(131072)
writer.add_embedding_length(4096)
writer.add_block_count(32)
writer.add_head_count(32)
writer.add_head_count_kv(8)
writer.add_rope_freq_base(500000.0)
writer.add_rope_dimension_count(128)
writer.add_tensor("rope_freqs.weight", factors)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
