"""streamfold: an LLM token stream in, a correct OpenAI Responses API event stream out."""

__all__ = ["__version__"]

__version__ = "0.1.0"
