module dq.example/examples

go 1.19
