"""Running one model on one device: devices, the fallback recorder, stages, numerics."""
