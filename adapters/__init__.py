"""streamfold.adapters."""
