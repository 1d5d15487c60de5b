"""Serve the rloo-demo web app: ``python app.py`` (http://127.0.0.1:7860; GRADIO_SERVER_NAME / _PORT override)."""

from rloo_demo.ui.app import main

if __name__ == "__main__":
    main()
