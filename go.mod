module eaimq

go 1.26.8

require github.com/rabbitmq/amqp091-go v1.16.0

require github.com/mattn/go-sqlite3 v1.14.53
