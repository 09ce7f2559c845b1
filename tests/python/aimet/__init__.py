"""polyquant.aimet against aimet-torch 2.42.0."""
