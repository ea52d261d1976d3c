"""The generalization suite (issue 16): frozen manifests, the runner and its report."""
