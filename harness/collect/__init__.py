"""A run's result files made into its tables: the jobs' results read and the scaling arithmetic
done (`gather`), the summary built a result at a time (`builder`), and the summary set with its
columns, versions and files (`summary`)."""
