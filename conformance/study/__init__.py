"""`vtwin study continuum`'s library: FCFS and Continuum on the same workload (`continuum`) and
the study page (`html`)."""
