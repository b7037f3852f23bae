"""The SQS-compatible endpoint: Amazon SQS's JSON protocol on the broker's own queues and moves.

limits.py      SQS's names, limits and defaults, written once
errors.py      SQS's errors and how they are answered
protocol.py    POST /sqs: signature, target, body, dispatch, the JSON answer
sigv4.py       AWS Signature Version 4 verification
params.py      reading an action's parameters, SQS's way of refusing them
attributes.py  message attributes: validation, size, SQS's MD5 digests
queues.py      queue actions; SqsQueue rows and the broker's queues
queueattrs.py  queue attributes: reading, validating, reporting
sending.py     SendMessage(Batch): a message is an enqueued task (MessageGroupId: its key)
dedup.py       FIFO queues' deduplication ids: each enqueued once per 5 minutes
receiving.py   ReceiveMessage (a claim), DeleteMessage (an ack), ChangeMessageVisibility
"""
