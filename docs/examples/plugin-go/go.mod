module example.com/devbuf-plugin-go

go 1.19
