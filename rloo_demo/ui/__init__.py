"""The Gradio web app; ``rloo_demo.ui.app.build_app`` assembles it."""
