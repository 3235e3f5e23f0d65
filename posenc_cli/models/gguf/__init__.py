"""GGUF files: the header reader (standard library; the header alone is read) and what llama.cpp's rope factor
tensors mean in transformers' terms."""
