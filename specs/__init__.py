"""streamfold.specs."""
