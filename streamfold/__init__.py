"""streamfold: an LLM token stream in, a correct OpenAI Responses API event stream out."""

__version__ = "0.1.0"
