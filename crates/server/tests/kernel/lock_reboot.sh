# The same client after its reboot: its status monitor tells the server
# (SM_NOTIFY), then it locks what it held before.
kstatd notify 10.0.2.2 clienta 5 && echo RESULT notified=1
/opt/klock try data 0 100
echo RESULT done=1
