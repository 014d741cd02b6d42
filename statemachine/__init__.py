"""streamfold.statemachine."""
