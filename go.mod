module github.com/nezha-project/nezha

go 1.24.0
