"""A tiny instruct-style policy for offline tests: a Llama (or Qwen2) architecture with random weights and the embedded
tokenizer given a chat template, saved to a folder. Its template's markers are plain text to this tokenizer, so a test
can find them in what TRL tokenized and check that nothing a person reads contains them."""

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MARKERS = ("<|user|>", "<|assistant|>", "<|end|>", "<|system|>")


def build_chat_model(folder: Path, architecture: str = "llama") -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from rloo_demo.models.hub import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("embedded:tiny-imdb-gpt2"))
    tokenizer.chat_template = CHAT_TEMPLATE
    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[
        architecture
    ]
    config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = model_class(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
