# Hugging Face Space image (sdk: docker, app_port: 7860): CPU-only torch, non-root uid 1000, embedded assets baked in.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/home/user \
    HF_HOME=/home/user/.cache/huggingface \
    RLOO_RUNS_DIR=/home/user/runs \
    RLOO_PUBLIC=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    TOKENIZERS_PARALLELISM=false

# Fonts with Georgian and Cyrillic script: the page is also in Georgian and Russian (rloo_demo/locales); the
# plots are drawn in the browser, but server-side renders (screenshots, exports) need the glyphs too.
RUN apt-get update && apt-get install -y --no-install-recommends fonts-noto-core && rm -rf /var/lib/apt/lists/*

# Spaces run the container as uid 1000; it needs a writable HOME, HF cache and run folder.
RUN useradd --create-home --uid 1000 user
WORKDIR /home/user/app

# CPU wheel of torch first, from PyTorch's CPU index, so pip never pulls the multi-GB CUDA build.
COPY --chown=user requirements.txt .
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip install -r requirements.txt

COPY --chown=user . .
RUN pip install --no-deps -e . \
 && mkdir -p "$RLOO_RUNS_DIR" "$HF_HOME" && chown -R user:user /home/user

USER user
EXPOSE 7860
CMD ["python", "app.py"]
