"""Reading trained models: what each head does (head analysis) and the circuits heads form."""
