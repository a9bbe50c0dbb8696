"""The split: MinHash leak clusters of problems, train / held-out sides no cluster crosses, held-out
problems, and decontamination of training inputs against them."""
