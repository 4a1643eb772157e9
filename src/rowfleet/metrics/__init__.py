"""What ``/metrics`` says and how finished jobs are tallied. Pure."""
