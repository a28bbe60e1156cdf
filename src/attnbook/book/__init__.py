"""The book's own support: plotting in the book's heatmap convention, schematic diagrams and the
offline interactive explorer."""
