"""The wall around untrusted text (kernels, problem files): the child environment, the sandbox launcher, namespaces
and cgroups, and Python children the working directory cannot shadow. Imports only `core`."""
