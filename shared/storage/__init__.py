"""Storage: one contract (a Protocol and its records) per store at this level, one folder per backend (sqlite/ locally,
aws/ deployed), and `factory` to open the stores the settings name."""
