"""The learned safety classifier at run time: the cascade, its encoders, features and heads."""
