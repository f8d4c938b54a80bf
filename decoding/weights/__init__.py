"""The weights: everything between a model's name and a loaded model (``loading.py`` is the front door):
names, registry packs, GGUF conversion, tokenizers, what a model can do, quantization and its hybrids,
llama.cpp's model and cache state, this CPU's instruction sets and the kinds of CPU it can emulate, and the
bundled starter pair.
"""
